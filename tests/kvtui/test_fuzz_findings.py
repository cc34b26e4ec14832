"""States random keys reach (tests/helpers/ui_fuzz.py), each pinned here by the keys that lead to it."""

from __future__ import annotations

import pytest
from textual.widgets import TabbedContent

from kvtui.app import KvtuiApp
from kvtui.state.timeline import Timeline

pytestmark = pytest.mark.anyio


def _app(trace) -> KvtuiApp:
    header, events = trace
    return KvtuiApp(Timeline(header, events), source="t", clock=lambda: 0.0, frame_rate=None)


async def test_metrics_before_the_first_hit_rates_event(small_trace):
    # before the first hit_rates event the window's size is not known
    app = _app(small_trace)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+home", "4")
        await pilot.pause()
        assert app.state.hit_rates is None
        assert "windowed = last N lookups" in str(app.query_one("#charts").render_line(0))


async def test_the_hidden_whatif_tab_cannot_be_shown(small_trace):
    # the what-if tab is hidden on this trace: `7` says so, and the tab bar's arrows never reach it
    app = _app(small_trace)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3", "7")
        tabs = app.query_one("#tabs", TabbedContent)
        assert tabs.active == "tree"
        assert any("whatif -o" in n.message for n in app._notifications)
        await pilot.press("shift+tab", "left", "right", "right")
        await pilot.pause()
        assert tabs.active != "whatif"
