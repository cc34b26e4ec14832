"""The attach explain tab's prompt box: keys typed there are text (digits and q too), and the footer says so and
how to leave it."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import TabbedContent

from kvtui.app.fleet_app import FleetApp
from kvtui.app.loader import load_trace

ATTACH = Path(__file__).resolve().parents[3] / "fixtures" / "attach" / "concurrent8_smollm2.jsonl"
pytestmark = pytest.mark.anyio


def _footer(app) -> dict[str, str]:
    """Key -> description of what the footer shows now."""
    return {
        b.key: b.description for _, b, enabled, _ in app.screen.active_bindings.values() if b.show and enabled
    }


async def test_the_footer_says_how_to_leave_the_box_and_that_keys_are_text_there():
    trace = load_trace(str(ATTACH))
    app = FleetApp(source="attach", header=trace.header, events=trace.events, frame_rate=None)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        box = app.query_one("#explain-input")
        assert app.focused is box
        footer = _footer(app)
        assert "leave the box" in footer["escape"] and "1-4, g, q are text" in footer["escape"]
        assert footer["ctrl+s"] == "explain the prompt"
        # typed into the box, as the footer says
        await pilot.press("4", "q")
        assert box.text == "4q" and app.is_running
        await pilot.press("escape")
        assert app.focused is not box
        # out of the box the tab keys work again
        await pilot.press("4")
        assert app.query_one("#fleet-tabs", TabbedContent).active == "requests"
