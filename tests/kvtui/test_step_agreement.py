"""The status line and the `k` panel name the same engine step, also between a step's chunks and its end."""

from __future__ import annotations

import pytest

from kvtui.app import KvtuiApp
from kvtui.screens.panel import PanelScreen
from kvtui.state.timeline import Timeline

pytestmark = pytest.mark.anyio


async def test_mask_panel_and_status_line_agree_on_the_step(small_trace):
    header, events = small_trace
    # just after a decode of step k, before the `step` event that ends step k
    cursor = next(
        i + 1
        for i, ev in enumerate(events)
        if ev["type"] == "decode" and ev["step"] > 2 and events[i + 1]["type"] != "step"
    )
    k = events[cursor - 1]["step"]
    app = KvtuiApp(Timeline(header, events), source="t", clock=lambda: 0.0, frame_rate=None)
    async with app.run_test(size=(120, 40)) as pilot:
        app.seek(cursor)
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, PanelScreen)
        heading = "".join(seg.text for seg in app.screen.body.render_row(0, 120))
        assert f"of engine step {k} " in heading
        # the step under way, not the last one that ended (k-1)
        assert f"step {k} (in progress)" in app.status_text()
        # once the step's own event is applied, both say k and the step has ended
        app.seek(next(i + 1 for i in range(cursor, len(events)) if events[i]["type"] == "step"))
        await pilot.pause()
        assert f"· step {k} ·" in app.status_text()
        assert f"of engine step {k} " in "".join(seg.text for seg in app.screen.body.render_row(0, 120))
