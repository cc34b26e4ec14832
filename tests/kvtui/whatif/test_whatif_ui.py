"""The what-if view: `kvtui whatif --ui` (WhatIfApp: the job in a thread worker, a progress bar, then the
curve, the causes and the fleet), the what-if tab of replay on a simulated trace (hidden on other traces), and
the miss explainer's causes."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.trace import read_trace
from kvtui.app import KvtuiApp
from kvtui.app.whatif_app import WhatIfApp, replay_summary
from kvtui.state.timeline import Timeline
from kvtui.widgets.whatif_view import WhatIfView, cause_bars

ROOT = Path(__file__).resolve().parents[3]
WORKLOAD = str(ROOT / "fixtures" / "traces" / "shared_system_8users.jsonl")

# a fixed summary (the shape of the whatif_summary event), for a deterministic snapshot
SUMMARY = {
    "workload": "mooncake_12k.jsonl",
    "format": "mooncake",
    "requests": 12000,
    "prompt_tokens": 144_000_000,
    "ceiling": 0.62,
    "current": {"capacity_tokens": 3_000_000, "block_size": 512, "eviction": "lru"},
    "points": [
        {
            "capacity_tokens": c,
            "block_size": 512,
            "eviction": "lru",
            "method": m,
            "token_hit_rate": r,
            "misses": {},
        }
        for c, m, r in [
            (300_000, "simulated", 0.21),
            (3_000_000, "simulated", 0.43),
            (30_000_000, "simulated", 0.6),
            (300_000, "one-pass", 0.22),
            (3_000_000, "one-pass", 0.45),
            (30_000_000, "one-pass", 0.6),
        ]
    ],
    "optimal": [
        {"capacity_tokens": 300_000, "token_hit_rate": 0.3},
        {"capacity_tokens": 3_000_000, "token_hit_rate": 0.52},
        {"capacity_tokens": 30_000_000, "token_hit_rate": 0.61},
    ],
    "curve": [{"capacity_tokens": 512 * 2**i, "token_hit_rate": min(0.6, 0.035 * i)} for i in range(0, 18)],
    "misses": {"compulsory": 54_000_000, "capacity": 26_000_000, "in_flight": 1_500_000, "last_token": 12000},
    "fleet": {
        "router": "kv_aware",
        "workers": 2,
        "capacity_tokens_per_worker": 3_000_000,
        "token_hit_rate": 0.4,
        "misses": {},
        "duplicated_blocks": 120,
        "cached_blocks": 11000,
        "longest_prefix_token_hit_rate": 0.42,
        "regret": 0.02,
        "global_cache_token_hit_rate": 0.5,
        "per_worker": [
            {
                "worker": 0,
                "requests": 6100,
                "prompt_tokens": 73_000_000,
                "token_hit_rate": 0.41,
                "preemptions": 3,
            },
            {
                "worker": 1,
                "requests": 5900,
                "prompt_tokens": 71_000_000,
                "token_hit_rate": 0.39,
                "preemptions": 0,
            },
        ],
    },
}


def fixed_job(make_progress):
    progress = make_progress("ceiling")
    for i in range(0, 12000, 4000):
        progress(i, 0.0)
    return SUMMARY


async def _finished(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.pause()


def test_snapshot_of_the_whatif_view(snap_compare):
    """The curve (log axis, ceiling, optimal, simulated, current), the cause bars and the fleet table."""
    app = WhatIfApp(fixed_job, source="mooncake_12k.jsonl", requests=12000, stages=1)
    assert snap_compare(app, terminal_size=(110, 40), run_before=_finished)


@pytest.mark.anyio
async def test_the_job_runs_in_a_worker_with_progress_and_then_shows_its_summary():
    from kvtui.whatif.cost import CostModel
    from kvtui.whatif.loaders import load
    from kvtui.whatif.report import summary_event
    from kvtui.whatif.sweep import SweepOptions
    from kvtui.whatif.sweep import run_sweep as _run
    from kvtui.whatif.sweep import sweep_configs as _configs

    loaded = load(WORKLOAD)
    cost = CostModel()
    configs = _configs({16: [256, 1024]}, [16], ["lru"], [(8192, 256)], [True], cost)
    labels = []

    def job(make_progress):
        def traced(label):
            labels.append(label)
            return make_progress(label)

        report = _run(loaded, configs, SweepOptions(cost=cost, quiet=True, make_progress=traced))
        return summary_event(report, report["current"], report.pop("current_misses"))

    app = WhatIfApp(job, source="shared", requests=len(loaded.requests), stages=5)
    async with app.run_test(size=(100, 34)) as pilot:
        await _finished(pilot)
        # a token workload: its ceiling is simulated (the engine caches generated tokens too)
        assert labels[:2] == ["the one-pass curve", "ceiling"] and len(labels) == 5
        assert not app.query_one("#whatif-progress").display
        view = app.query_one("#whatif-view", WhatIfView)
        assert view.display and view.summary is app.summary
        assert [p["capacity_tokens"] for p in view.summary["optimal"]] == [256, 1024]
        assert "compulsory" in str(app.query_one("#whatif-causes").render())


def test_cause_bars_are_shares_of_the_prompt_tokens():
    text = cause_bars({"compulsory": 30, "capacity": 10}, 100, width=30).plain
    assert text.splitlines()[0] == "of the 40.0% of prompt tokens missed: 30.0% compulsory, 10.0% capacity"
    assert "█" * 30 + "  30.0%" in text and "█" * 10 + "  10.0%" in text


@pytest.mark.anyio
async def test_replay_of_a_simulated_trace_has_the_whatif_tab_and_other_traces_do_not(tmp_path):
    from kvtui.cli import main

    out = tmp_path / "sim.jsonl"
    result = CliRunner().invoke(main, ["whatif", WORKLOAD, "--capacity", "256,1k", "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    parsed = read_trace(out, strict=True)
    assert parsed.error is None and parsed.events[-1]["type"] == "whatif_summary"
    app = KvtuiApp(Timeline(parsed.header, parsed.events), source="sim", clock=lambda: 0.0, frame_rate=None)
    async with app.run_test(size=(100, 34)) as pilot:
        await pilot.pause()
        assert replay_summary(app)["current"]["capacity_tokens"] == 256
        await pilot.press("7")
        await pilot.pause()
        view = app.query_one("#whatif-view", WhatIfView)
        assert view.summary is parsed.events[-1]
        # the miss explainer names the causes of the selected request's missed tokens
        app.seek(len(parsed.events))
        await pilot.press("3")
        app.select_request("user3")
        await pilot.pause()
        assert "missed: 12 divergence, 1 last token" in str(app.query_one("#miss").render())

    plain = read_trace(ROOT / "fixtures" / "traces" / "synthetic_small.jsonl", strict=True)
    app = KvtuiApp(Timeline(plain.header, plain.events), source="s", clock=lambda: 0.0, frame_rate=None)
    async with app.run_test(size=(100, 34)) as pilot:
        await pilot.pause()
        from textual.widgets import TabbedContent

        tabs = app.query_one("#tabs", TabbedContent)
        assert tabs.get_tab("whatif").display is False


def test_the_ui_flag_hands_the_whole_job_to_the_app(monkeypatch):
    from kvtui.cli import main

    seen = {}

    def run(self):
        labels = []
        seen["summary"] = self.job(lambda label: labels.append(label) or (lambda index, sim_t: None))
        seen["stages"], seen["labels"] = self.stages, labels

    monkeypatch.setattr(WhatIfApp, "run", run)
    result = CliRunner().invoke(main, ["whatif", WORKLOAD, "--capacity", "256,1k", "--ui"])
    assert result.exit_code == 0, result.output
    # the one-pass curve, the ceiling, two capacities, the Belady bound: one progress stage each
    assert seen["stages"] == len(seen["labels"]) == 5
    summary = seen["summary"]
    assert summary["current"]["capacity_tokens"] == 256 and summary["curve"]
    assert sum(summary["misses"].values()) > 0


def _rate(tokens: int) -> float:
    """The fixed summary's curve as a function: 3.5 points per doubling from one block, up to 60%."""
    import math

    return min(0.6, 0.035 * math.log2(max(tokens, 512) / 512))


def tiered_summary() -> dict:
    """The fixed summary with a host tier of 1M and a disk of 1M under each device capacity."""
    devices = [512 * 4**i for i in range(8)]
    hosts = [0] + devices
    host, disk = 1_000_000, 1_000_000
    points = [p for p in SUMMARY["points"] if p["method"] == "simulated"]
    for c in (300_000, 3_000_000, 30_000_000):
        device, below = _rate(c), _rate(c + host)
        points.append(
            {
                "capacity_tokens": c,
                "host_capacity_tokens": host,
                "disk_capacity_tokens": disk,
                "block_size": 512,
                "eviction": "lru",
                "method": "one-pass",
                "token_hit_rate": _rate(c + host + disk),
                "tiers": {"device": device, "host": below - device, "disk": _rate(c + host + disk) - below},
                "misses": {},
                "prefill_seconds_saved": 1000.0 * (below - device),
            }
        )
    curve = [
        {
            "capacity_tokens": d,
            "device": _rate(d),
            "host": _rate(d + host) - _rate(d),
            "disk": 0.6 - _rate(d + host),
        }
        for d in devices
    ]
    tiers = {
        "current": {"host_capacity_tokens": host, "disk_capacity_tokens": disk},
        "curve": curve,
        "surface": {
            "device_tokens": devices,
            "host_tokens": hosts,
            "disk_tokens": disk,
            "token_hit_rate": [[_rate(d + h + disk) for h in hosts] for d in devices],
            "prefill_seconds_saved": None,
        },
    }
    current = {**SUMMARY["current"], "host_capacity_tokens": host, "disk_capacity_tokens": disk}
    return {**SUMMARY, "points": points, "tiers": tiers, "current": current, "fleet": None}


def test_snapshot_of_the_tiers_curve_per_tier_and_the_surface(snap_compare):
    """With tiers: the device + host and + disk lines over the device-only curve, and the heat map."""
    summary = tiered_summary()
    app = WhatIfApp(lambda make_progress: summary, source="mooncake_12k.jsonl", requests=12000, stages=1)
    assert snap_compare(app, terminal_size=(110, 48), run_before=_finished)


@pytest.mark.anyio
async def test_the_heat_map_shows_the_surface_and_hides_without_tiers():
    summary = tiered_summary()
    app = WhatIfApp(lambda make_progress: summary, source="m", requests=10, stages=1)
    async with app.run_test(size=(110, 48)) as pilot:
        await _finished(pilot)
        heat = app.query_one("#whatif-heatmap")
        assert heat.display and heat.size.height == len(summary["tiers"]["surface"]["device_tokens"]) + 2
        lines = heat.render().plain.splitlines()
        assert "disk 1M" in lines[0]
        assert lines[1].split() == [
            "device",
            "-",
            "512",
            "2.05k",
            "8.19k",
            "32.8k",
            "131k",
            "524k",
            "2.1M",
            "8.39M",
        ]
        # a row: its device capacity, then each host capacity's hit rate
        rates = summary["tiers"]["surface"]["token_hit_rate"][0]
        assert lines[2].split() == ["512", *[f"{100 * r:.0f}%" for r in rates]]
        head = str(app.query_one("#whatif-head").render())
        assert "+ host 1M + disk 1M" in head and "% host" in head and "s of prefill saved" in head
        app.query_one(WhatIfView).show(SUMMARY)
        await pilot.pause()
        assert not heat.display
