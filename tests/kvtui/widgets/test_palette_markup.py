"""Roles as Content markup draw in the theme's colours: muted and free text dimmer than text (Content drops the
alpha of Textual's `auto N%` colours, so `$text-muted` used to draw as bright white)."""

from __future__ import annotations

import pytest
from textual.app import App
from textual.content import Content
from textual.widgets import Static

from kvtui.widgets.palette import markup


class Shown(App):
    def compose(self):
        yield Static(id="line")

    def on_mount(self):
        parts = [("text ", markup("heading")), ("muted ", markup("dim")), ("free", markup("free"))]
        self.query_one("#line", Static).update(Content.assemble(*parts))


@pytest.mark.anyio
@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
async def test_muted_and_free_text_are_dimmer_than_text(theme):
    app = Shown()
    async with app.run_test(size=(40, 3)) as pilot:
        app.theme = theme
        app.query_one("#line", Static).update(
            Content.assemble(("muted ", markup("dim")), ("free ", markup("free")), ("plain", "$text"))
        )
        await pilot.pause()
        colours = {
            s.text.strip(): s.style.color.triplet.hex
            for s in app.query_one("#line").render_line(0)
            if s.text.strip()
        }
        # white (dark theme) or black (light theme) is text at full strength: what the old markup drew
        full = "#ffffff" if theme == "textual-dark" else "#000000"
        assert colours["muted"] != full and colours["free"] != full, colours
        assert colours["muted"] != colours["plain"] and colours["free"] != colours["muted"]
