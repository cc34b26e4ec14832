"""The what-if tab's latency scatter: `kvtui whatif LOG --latency -o TRACE` on a real vLLM proxy log keeps each
request's served and predicted TTFT in the trace's summary, and the replayed what-if tab draws them."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.trace import read_trace
from kvtui.app import KvtuiApp
from kvtui.cli import main
from kvtui.state.timeline import Timeline
from kvtui.widgets.whatif_latency import LatencyScatter, error_title, ms_pairs

LOG = Path(__file__).resolve().parents[3] / "fixtures" / "attach" / "vllm_0.32_proxy_waves.jsonl"


def _summary(tmp_path) -> tuple[Path, dict]:
    out = tmp_path / "whatif.jsonl"
    result = CliRunner().invoke(main, ["whatif", str(LOG), "--latency", "-q", "-o", str(out)])
    assert result.exit_code == 0, result.output
    parsed = read_trace(out, strict=True)
    return out, parsed.events[-1]


def test_the_summary_keeps_served_and_predicted_ttft_per_request(tmp_path):
    _, summary = _summary(tmp_path)
    latency = summary["latency"]
    pairs = ms_pairs(latency, "ttft")
    assert len(pairs) == latency["requests"] == 24
    assert all(served > 0 and guess > 0 for served, guess in pairs)
    title = error_title(latency, "ttft", "TTFT")
    served = latency["ttft"]["served"]["p50"] * 1e3
    assert title.startswith(f"TTFT served -> predicted: p50 {served:.0f} -> ")


@pytest.mark.anyio
async def test_the_replayed_whatif_tab_draws_the_scatter(tmp_path):
    path, _ = _summary(tmp_path)
    parsed = read_trace(path, strict=True)
    app = KvtuiApp(
        Timeline(parsed.header, parsed.events), source=path.name, clock=lambda: 0.0, frame_rate=None
    )
    async with app.run_test(size=(120, 50)) as pilot:
        await pilot.press("7")
        await pilot.pause()
        scatter = app.query_one("#whatif-latency", LatencyScatter)
        assert scatter.display and scatter.latency["requests"] == 24
