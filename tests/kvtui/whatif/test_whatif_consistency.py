"""The what-if figures agree with each other on every fixture trace: each row's bytes are its tokens x its own
precision's bytes per token, hits and misses add up to the prompt tokens, the simulated hits less the
partly-filled-block and generated-token hits are within the whole-prompt-block optimal, the tier split the
--ui header shows is the simulated run's own, and the table's seconds saved and GPU-hours per day say the
same thing."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.models.kv_budget import bytes_per_token_at, shape_from_config
from kvtui.cli import main
from kvtui.whatif.report import summary_event
from kvtui.widgets.whatif_view import headline
from tests.helpers.model_configs import LLAMA_3_8B as CONFIG

ROOT = Path(__file__).resolve().parents[3]
TRACES = sorted((ROOT / "fixtures" / "traces").glob("*.jsonl"))


@functools.cache
def _config(folder: str) -> str:
    path = Path(folder) / "config.json"
    path.write_text(json.dumps(CONFIG))
    return str(path)


def _report(*args: str) -> dict:
    result = CliRunner().invoke(main, ["whatif", *args, "--json", "-q"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.stem)
def test_bytes_hits_and_the_whole_prompt_block_figures_agree(trace, tmp_path_factory):
    config = _config(str(tmp_path_factory.getbasetemp()))
    report = _report(
        str(trace), "--capacity", "256,64MiB", "--kv-config", config, "--kv-dtype", "bfloat16,fp8"
    )
    shape = shape_from_config(CONFIG)
    prompt = report["prompt_tokens"]
    optimal = {o["capacity_tokens"]: o["token_hit_rate"] for o in report["optimal"]}
    assert {p["kv_dtype"] for p in report["points"]} == {"bfloat16", "fp8"}
    for point in report["points"]:
        # bytes = tokens x that row's precision's bytes per token
        assert point["capacity_bytes"] == round(
            point["capacity_tokens"] * bytes_per_token_at(shape, point["kv_dtype"])
        )
        if point["method"] != "simulated":
            continue
        # hit + missed = every prompt token
        assert round(point["token_hit_rate"] * prompt) + sum(point["misses"].values()) == prompt
        whole = (
            point["token_hit_rate"] * prompt - point["reused_partial_tokens"] - point["generated_hit_tokens"]
        )
        if point["capacity_tokens"] in optimal:
            assert whole <= optimal[point["capacity_tokens"]] * prompt + 1e-6


@pytest.mark.parametrize("trace", [t for t in TRACES if t.stem != "synthetic_small"], ids=lambda p: p.stem)
def test_the_tier_split_shown_is_the_simulated_runs_own(trace, tmp_path_factory):
    config = _config(str(tmp_path_factory.getbasetemp()))
    report = _report(str(trace), "--capacity", "96", "--host-capacity", "96", "--kv-config", config)
    simulated = next(p for p in report["points"] if p["method"] == "simulated")
    shown = headline(summary_event(report, report["current"], {})).plain.splitlines()[-1]
    tiers = simulated["tiers"]
    assert shown.startswith(f"tiers (simulated): {100 * tiers['device']:.1f}% device")
    if tiers["host"]:
        assert f"{100 * tiers['host']:.1f}% host" in shown


def test_seconds_saved_and_gpu_hours_per_day_say_the_same(tmp_path):
    """host_tier at 96 tokens and a host of 96: 0.0031 s saved over a 1.4 s trace is 0.053 GPU-hours a day; the
    table must not round the first to 0.0 beside the second."""
    config = _config(str(tmp_path))
    args = ["whatif", str(ROOT / "fixtures/traces/host_tier.jsonl"), "--capacity", "96"]
    table = CliRunner().invoke(main, [*args, "--host-capacity", "96", "--kv-config", config, "-q"]).stdout
    span = re.search(r"over the trace's ([0-9.]+) s", table)
    assert span, table
    row = next(
        line.split() for line in table.splitlines() if line.split()[:4] == ["96", "96", "-", "simulated"]
    )
    saved, per_day = float(row[8]), float(row[9])
    assert saved > 0
    # both shown to three significant digits: the day's figure follows from the seconds shown
    assert per_day == pytest.approx(saved / 3600 * 86400 / float(span.group(1)), rel=0.02)
