"""SVG snapshots of the panels (attention masks `k`, roofline `l`) on a saved tiny hybrid-model trace
(tests/kvtui/data/hybrid_tiny.jsonl: 2 window layers W=8 and 1 full layer; see tests/helpers/tiny_trace.py)."""

from __future__ import annotations

from pathlib import Path

from engine.trace import read_trace
from kvtui.app import KvtuiApp
from kvtui.state.timeline import Timeline

TRACE = Path(__file__).resolve().parents[1] / "data" / "hybrid_tiny.jsonl"


def app_at_step(step: int) -> KvtuiApp:
    parsed = read_trace(TRACE, strict=True)
    app = KvtuiApp(
        Timeline(parsed.header, parsed.events), source="hybrid_tiny.jsonl", clock=lambda: 0.0, frame_rate=None
    )
    app.initial_cursor = next(
        i + 1 for i, ev in enumerate(parsed.events) if ev["type"] == "step" and ev["step"] == step
    )
    return app


async def _seek(pilot) -> None:
    pilot.app.seek(pilot.app.initial_cursor)
    await pilot.pause()


def test_mask_panel_prefix_hit_and_fresh_prefill(snap_compare):
    assert snap_compare(app_at_step(6), press=["k"], terminal_size=(100, 40), run_before=_seek)


def test_roofline_panel(snap_compare):
    assert snap_compare(app_at_step(27), press=["l"], terminal_size=(110, 30), run_before=_seek)
