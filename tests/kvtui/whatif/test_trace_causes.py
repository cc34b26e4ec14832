"""Miss causes read from a trace (`kvtui stats`, the miss explainer): the same ledger as the simulation, fed
from the file's events; they add up to the misses per request and per workload, on what-if traces and on
kvtui's engine traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.trace import read_trace
from kvtui.cli import main
from kvtui.whatif.causes import ledger_from_trace
from kvtui.whatif.loaders import load
from kvtui.whatif.requests import SimRequest
from kvtui.whatif.simulate import SimConfig, simulate

ROOT = Path(__file__).resolve().parents[3]
TRACES = sorted((ROOT / "fixtures" / "traces").glob("*.jsonl"))


@pytest.mark.parametrize("capacity", [320, 480, 4096])
def test_a_simulated_trace_gives_the_simulations_causes(tmp_path, capacity):
    workload = load(str(ROOT / "fixtures" / "traces" / "shared_system_8users.jsonl"))
    out = tmp_path / "sim.jsonl"
    config = SimConfig(capacity, 16, max_num_seqs=4, max_batched_tokens=64)
    result = simulate(workload.requests, config, trace_path=out)
    parsed = read_trace(out, strict=True)
    ledger = ledger_from_trace(parsed.header, parsed.events)
    assert ledger.totals() == (result.prompt_tokens, result.hit_tokens, result.causes)
    for rid, record in result.ledger.requests.items():
        assert ledger.requests[rid].as_dict() == record.as_dict()


def test_preemption_and_capacity_read_from_a_trace_as_the_simulation_counted_them(tmp_path):
    # a shared head every third request, others their own; 40 generated tokens each in a pool of 12 blocks:
    # preemptions (recomputed tokens) and evictions (capacity misses)
    base = list(range(1000, 1064))
    requests = [
        SimRequest(
            f"r{i}",
            0.01 * i,
            (base if i % 3 == 0 else list(range(5000 + 100 * i, 5064 + 100 * i))) + [i],
            None,
            40,
        )
        for i in range(12)
    ]
    out = tmp_path / "sim.jsonl"
    result = simulate(requests, SimConfig(192, 16, max_num_seqs=4, max_batched_tokens=64), trace_path=out)
    assert result.preemptions and result.causes["preemption"] and result.causes["capacity"]
    parsed = read_trace(out, strict=True)
    ledger = ledger_from_trace(parsed.header, parsed.events)
    assert ledger.totals() == (result.prompt_tokens, result.hit_tokens, result.causes)
    for rid, record in result.ledger.requests.items():
        assert ledger.requests[rid].as_dict() == record.as_dict()


@pytest.mark.parametrize("trace", TRACES, ids=[t.stem for t in TRACES])
def test_causes_add_up_to_the_misses_on_engine_traces(trace):
    result = CliRunner().invoke(main, ["stats", "--json", str(trace)])
    assert result.exit_code == 0, result.output
    misses = json.loads(result.output).get("misses")
    if misses is None:
        # no prefix_match events (an attach trace): no causes claimed
        return
    assert (
        sum(misses["causes"].values())
        == misses["missed_tokens"]
        == misses["prompt_tokens"] - misses["hit_tokens"]
    )
    for request in misses["requests"]:
        assert sum(request["misses"].values()) == request["prompt_tokens"] - request["hit_tokens"]


def test_stats_prints_the_shares_and_the_worst_requests():
    result = CliRunner().invoke(
        main, ["stats", str(ROOT / "fixtures" / "traces" / "shared_system_8users.jsonl")]
    )
    assert result.exit_code == 0
    assert (
        "misses    of the 17.6% of prompt tokens missed: 12.4% compulsory, 4.8% divergence" in result.output
    )
    assert "differs at 198 (cached id 57" in result.output
