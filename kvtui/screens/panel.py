"""A full-screen panel over the tabs for a view that reads the trace's events: the attention masks of the step
at the cursor (`k`) and prefill vs decode on the roofline (`l`). The app's keys still work underneath (step with
`>` `<`, play with space, `[` `]` to change the selected request), and the app redraws the panel each frame."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen

from kvtui.widgets.base import LineView, TextLine, View
from kvtui.widgets.mask import MaskView
from kvtui.widgets.roofline import RooflineView

PANELS: dict[str, tuple[type[LineView], str]] = {
    "mask": (MaskView, "attention masks of the step at the cursor"),
    "roofline": (RooflineView, "prefill vs decode on this machine's roofline"),
}


class PanelScreen(Screen):
    BINDINGS = [Binding("escape,q", "dismiss", "close panel", id="panel.close")]
    DEFAULT_CSS = """
    PanelScreen { layout: vertical; }
    PanelScreen #panel-status { height: 1; background: $primary-background; text-style: bold; }
    PanelScreen #panel-view { height: 1fr; }
    PanelScreen #panel-keys { height: 1; color: $text-muted; }
    """

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        cls, self.title_text = PANELS[kind]
        self.body = cls(id="panel-view")
        # made here: the app may draw before the screen is composed
        self.status = TextLine(id="panel-status")
        self.keys = TextLine(id="panel-keys")
        self.keys.set(f" {self.title_text} · > < engine step · space play · [ ] request · esc close")

    def compose(self) -> ComposeResult:
        yield self.status
        yield self.body
        yield self.keys

    def on_mount(self) -> None:
        self.body.focus()

    def update_view(self, view: View, events: list[dict], status: str) -> None:
        self.status.set(status)
        self.body.events = events
        self.body.update_view(view)
