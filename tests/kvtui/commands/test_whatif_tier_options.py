"""`kvtui whatif --host-capacity/--disk-capacity`: every device x host x disk point with its hits per tier, in
agreement with device-only runs of the same workload; the cost model's figures and assumptions in the JSON
and the table."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kvtui.cli import main
from kvtui.whatif.synth import MooncakeLikeConfig, mooncake_like, write_jsonl
from tests.helpers.model_configs import LLAMA_3_8B


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiers")
    workload = folder / "mooncake.jsonl"
    write_jsonl(mooncake_like(3, MooncakeLikeConfig(requests=600, duration_ms=1_800_000)), workload)
    config = folder / "config.json"
    config.write_text(json.dumps(LLAMA_3_8B))
    return str(workload), str(config)


def _run(args: list[str]) -> dict:
    result = CliRunner().invoke(main, ["whatif", *args, "--method", "one-pass", "--json", "-q"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _rates(report: dict) -> dict:
    return {p["capacity_tokens"]: p["token_hit_rate"] for p in report["points"]}


def test_each_tier_is_what_device_only_runs_of_the_same_workload_say(files):
    workload, _ = files
    tiered = _run(
        [workload, "--capacity", "100k,400k", "--host-capacity", "200k,1M", "--disk-capacity", "2M"]
    )
    pairs = [
        (p["capacity_tokens"], p["host_capacity_tokens"], p["disk_capacity_tokens"]) for p in tiered["points"]
    ]
    # capacities in whole blocks of 512
    assert pairs == [(d, h, 1_999_872) for d in (99_840, 399_872) for h in (199_680, 999_936)]
    sums = {d + h for d, h, _ in pairs} | {d + h + k for d, h, k in pairs}
    alone = _rates(_run([workload, "--capacity", ",".join(str(c) for c in sorted(sums | {99_840, 399_872}))]))
    for p in tiered["points"]:
        device, host, disk = p["capacity_tokens"], p["host_capacity_tokens"], p["disk_capacity_tokens"]
        tiers = p["tiers"]
        # the device serves what a device-only cache of its size serves; device and host, what one of both
        assert tiers["device"] == alone[device]
        assert tiers["device"] + tiers["host"] == pytest.approx(alone[device + host])
        assert p["token_hit_rate"] == pytest.approx(alone[device + host + disk])
        assert tiers["host"] > 0 and tiers["disk"] > 0
        # no --kv-config: no seconds
        assert p["prefill_seconds_saved"] is None
    section = tiered["tiers"]
    assert section["current"] == {"host_capacity_tokens": 199_680, "disk_capacity_tokens": 1_999_872}
    assert tiered["current"]["host_capacity_tokens"] == 199_680
    # the 600 requests arrive over about half an hour
    assert 1500 < section["trace_seconds"] <= 1800
    surface = section["surface"]
    assert len(surface["token_hit_rate"]) == len(surface["device_tokens"])
    assert all(len(row) == len(surface["host_tokens"]) for row in surface["token_hit_rate"])
    assert section["curve"] and set(section["curve"][0]) == {"capacity_tokens", "device", "host", "disk"}


def test_with_a_model_each_point_says_the_seconds_and_money_it_saves(files):
    workload, config = files
    args = [workload, "--capacity", "100k", "--host-capacity", "400k,4GiB", "--kv-config", config]
    report = _run([*args, "--gpu-hour-cost", "2", "--host-bandwidth", "25", "--gpu-tflops", "200"])
    model = report["tiers"]["assumptions"]
    assert model["bytes_per_token"] == 2 * 32 * 8 * 128 * 2
    assert model["host_bandwidth_bytes_per_s"] == 25e9 and model["gpu_flops"] == 200e12
    wide, narrow = report["points"]
    # 4 GiB of K/V at 128 KiB a token is 32,768 tokens: 64 blocks of 512
    assert narrow["host_capacity_tokens"] == 32_768
    prompt = report["prompt_tokens"]
    for p in report["points"]:
        host_tokens = p["tiers"]["host"] * prompt
        per_token = model["compute_seconds_per_token"] - model["host_load_seconds_per_token"]
        assert p["prefill_seconds_saved"] == pytest.approx(host_tokens * per_token)
        assert p["cost_per_day"] == pytest.approx(2 * p["gpu_hours_per_day"])
    assert wide["prefill_seconds_saved"] > narrow["prefill_seconds_saved"] > 0
    notes = " ".join(report["notes"])
    assert "25 GB/s --host-bandwidth" in notes and "200 TFLOP/s (--gpu-tflops)" in notes
    assert "$2 per GPU-hour" in notes


def test_the_table_has_a_row_per_point_and_states_the_assumptions(files):
    workload, config = files
    args = ["whatif", workload, "--method", "one-pass", "--capacity", "100k,400k", "--host-capacity", "1M"]
    result = CliRunner().invoke(main, [*args, "--kv-config", config, "-q"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:4] == ["device", "host", "disk", "method"])
    rows = [line.split() for line in lines[head + 1 : head + 3]]
    assert [r[:3] for r in rows] == [["99.8k", "1M", "-"], ["400k", "1M", "-"]]
    assert "seconds saved are against the device-only run" in result.output
    # no device-only table beside the tier table
    assert not any(line.split()[:2] == ["capacity", "bytes"] for line in lines)


def test_simulated_points_report_their_tiers_beside_the_one_pass_ones(files):
    workload, config = files
    args = ["whatif", workload, "--requests", "0:60", "--capacity", "60k", "--host-capacity", "100k,1M"]
    result = CliRunner().invoke(main, [*args, "--kv-config", config, "--json", "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    simulated = [p for p in report["points"] if p["method"] == "simulated"]
    one_pass = [p for p in report["points"] if p["method"] == "one-pass"]
    assert [p["host_capacity_tokens"] for p in simulated] == [p["host_capacity_tokens"] for p in one_pass]
    prompt = report["prompt_tokens"]
    model = report["tiers"]["assumptions"]
    for p in simulated:
        assert p["tiers"]["host"] > 0 and "tier_hit_tokens" not in p
        per_token = model["compute_seconds_per_token"] - model["host_load_seconds_per_token"]
        assert p["prefill_seconds_saved"] == pytest.approx(p["tiers"]["host"] * prompt * per_token)
    # the simulation's clock charged the loads: the cost model says so
    assert any("x token loaded from host" in n for n in report["notes"])
    table = CliRunner().invoke(main, [*args, "--kv-config", config, "-q"]).output
    # 60k and 100k in whole blocks of 512
    # the miss causes and the comparison with one-pass, a line per device + host configuration each
    labelled = [line.split()[0] for line in table.splitlines() if line.strip().startswith("59.9k+")]
    assert labelled == ["59.9k+99.8k", "59.9k+1M"] * 2


def test_the_ui_gets_the_curve_per_tier_and_the_surface(files, monkeypatch):
    from kvtui.app.whatif_app import WhatIfApp

    workload, _ = files
    seen = {}

    def run(self):
        seen["summary"] = self.job(lambda label: lambda index, sim_t: None)

    monkeypatch.setattr(WhatIfApp, "run", run)
    args = ["whatif", workload, "--method", "one-pass", "--capacity", "100k", "--host-capacity", "1M", "--ui"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    summary = seen["summary"]
    assert summary["current"]["host_capacity_tokens"] == 999_936
    assert summary["tiers"]["surface"]["token_hit_rate"] and summary["tiers"]["curve"]
    [point] = summary["points"]
    assert point["tiers"]["host"] > 0
