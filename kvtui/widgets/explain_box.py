"""The attach explain tab's prompt box: a multi-line text area where every printable key is text (a prompt may
hold digits and q), so its footer entry says how to leave it and that the tab keys type there."""

from __future__ import annotations

from textual.binding import Binding
from textual.widgets import TextArea


class ExplainBox(TextArea):
    BINDINGS = [
        Binding("escape", "app.leave_input", "leave the box (in it 1-4, g, q are text)", id="explain.leave"),
    ]
