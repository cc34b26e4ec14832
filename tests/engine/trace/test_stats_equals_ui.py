"""`kvtui stats` and the UI give the same numbers on every fixture trace: hit rates, TTFT / TPOT / ITL
percentiles (one module, engine/trace/metrics.py, defines them all), and hits and bytes by tier."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.trace import read_trace
from engine.trace.metrics import latency_summaries, percentile
from engine.trace.stats import summarize
from kvtui.commands.trace_commands import stats as stats_cmd
from kvtui.state import replay
from kvtui.widgets.timeline import latency_summary, latency_values

TRACES = sorted((Path(__file__).resolve().parents[3] / "fixtures" / "traces").glob("*.jsonl"))


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.stem)
def test_stats_json_equals_what_the_ui_shows(path):
    trace = read_trace(path, strict=True)
    result = CliRunner().invoke(stats_cmd, ["--json", str(path)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    figures = out["all"]
    # the UI's reducer, at the end of the trace
    state = replay(trace.header, trace.events)

    ui = latency_values(state)
    ours = summarize(trace.header, trace.events)[-1]
    assert sorted(ui["ttft"]) == sorted(ours.ttft) and sorted(ui["tpot"]) == sorted(ours.tpot)
    assert sorted(ui["itl"]) == sorted(ours.itl)
    summaries = latency_summaries(ui["ttft"], ui["tpot"], ui["itl"])
    for key in ("ttft", "tpot", "itl"):
        assert figures[f"{key}_s"] == pytest.approx(summaries[key], abs=0, rel=1e-12), key
    text = latency_summary(state).plain
    assert f"(n={figures['itl_s']['n']})" in text

    # the charts view shows the last hit_rates event the engine wrote
    shown = state.hit_rates
    if shown is None:
        assert figures["hit_counts"]["lookups"] == 0
    else:
        for rate in ("token_hit_rate", "request_hit_rate", "block_hit_rate"):
            assert figures[rate] == pytest.approx(shown[rate], abs=1e-12), rate

    # hits by tier and bytes loaded back (a trace with a host tier only), as the metrics view shows them
    if not state.tier_slots:
        assert "tiers" not in out
        return
    ui_tiers = {
        name: {
            "hit_tokens": n,
            **({} if name == "device" else {"loaded_bytes": state.tier_moves[name].loaded_bytes}),
        }
        for name, n in state.tier_hits.items()
    }
    assert out["tiers"] == ui_tiers
    assert sum(counts["hit_tokens"] for counts in ui_tiers.values()) == figures["hit_counts"]["hit_tokens"]
    text = CliRunner().invoke(stats_cmd, [str(path)]).output
    assert f"host {ui_tiers['host']['hit_tokens']:,} hit tokens" in text


def test_one_percentile_definition():
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([1, 2, 3, 4], 0) == 1
    assert percentile([5], 99) == 5 and percentile([], 50) is None
