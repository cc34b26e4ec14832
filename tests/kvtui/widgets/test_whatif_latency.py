"""Predicted against served latency in the what-if view: a point per request with both TTFT figures, the
errors in the title, hidden for a run without latency; `kvtui whatif LOG --ui --calibrate` hands it over."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from textual.app import App, ComposeResult

from kvtui.app.whatif_app import WhatIfApp
from kvtui.widgets.whatif_latency import LatencyScatter, points, title

LATENCY = {
    "calibration": {"per_step": 0.02, "per_prefill_token": 6e-4, "per_decode_row": 1e-3, "runs": 9},
    "cost": "step = 20 ms + 600 us x prefill token + 1 ms x decode row",
    "requests": 3,
    "ttft": {
        "served": {"p50": 1.0, "p95": 2.0},
        "predicted": {"p50": 1.1, "p95": 1.9},
        "error": {"p50": 0.1, "p95": -0.05},
    },
    "tpot": {
        "served": {"p50": 0.04, "p95": 0.05},
        "predicted": {"p50": 0.04, "p95": 0.05},
        "error": {"p50": 0.0, "p95": 0.02},
    },
    "per_request": [
        {"request_id": "a", "ttft": [1.0, 1.1], "tpot": [0.04, 0.04]},
        {"request_id": "b", "ttft": [2.0, 1.9], "tpot": [0.05, 0.05]},
        {"request_id": "c", "ttft": [None, 0.5], "tpot": [None, 0.04]},
    ],
    "at": [],
}


class One(App):
    def compose(self) -> ComposeResult:
        yield LatencyScatter(id="latency")


def test_each_request_with_both_figures_is_a_point_and_the_title_says_the_errors():
    assert points(LATENCY) == [(1000.0, 1100.0), (2000.0, 1900.0)]
    assert title(LATENCY) == (
        "predicted against served (calibrated on this log): TTFT p50 +10.0% p95 -5.0%, TPOT p50 +0.0% p95 +2.0%"
    )


@pytest.mark.anyio
async def test_the_scatter_shows_only_with_latency():
    app = One()
    async with app.run_test(size=(80, 24)) as pilot:
        scatter = app.query_one(LatencyScatter)
        assert not scatter.display
        scatter.show(LATENCY)
        await pilot.pause()
        assert scatter.display and scatter.latency is LATENCY
        scatter.show(None)
        await pilot.pause()
        assert not scatter.display


def test_the_ui_gets_the_latency_of_a_proxy_log(monkeypatch):
    from kvtui.cli import main

    seen = {}

    def run(self):
        seen["summary"] = self.job(lambda label: lambda index, sim_t: None)

    monkeypatch.setattr(WhatIfApp, "run", run)
    log = "fixtures/attach/vllm_0.32_proxy_waves.jsonl"
    result = CliRunner().invoke(main, ["whatif", log, "--ui", "--latency", "--max-batched-tokens", "2048"])
    assert result.exit_code == 0, result.output
    latency = seen["summary"]["latency"]
    assert latency["requests"] == 24 and len(points(latency)) == 24
