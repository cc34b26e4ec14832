"""Crashes the UI fuzz test (tests/helpers/ui_fuzz.py) found, each pinned by the keys that reached it."""

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
    # ValueError in plural(): the window's size was the string "N" until a hit_rates event
    app = _app(small_trace)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+home", "4")
        await pilot.pause()
        assert app.state.hit_rates is None
        assert "windowed = last N lookups" in str(app.query_one("#charts").render_line(0))


async def test_the_hidden_whatif_tab_cannot_be_shown(small_trace):
    # `7` made the hidden tab active; the tab bar's arrows then raised "ContentTab ... is not in list"
    app = _app(small_trace)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3", "7")
        tabs = app.query_one("#tabs", TabbedContent)
        assert tabs.active == "tree"
        assert any("whatif -o" in n.message for n in app._notifications)
        await pilot.press("shift+tab", "left", "right", "right")
        await pilot.pause()
        assert tabs.active != "whatif"
