"""The scrubber: where the cursor is in the trace, with markers for arrivals, edits, evictions and misses.

Line 1 holds the markers (`A` arrival, `E` edit, `x` eviction, `m` miss, `P` preemption; the most important
one wins a column), line 2 the progress bar. Clicking seeks.
"""

from __future__ import annotations

from rich.segment import Segment
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from kvtui.widgets.base import Themed, pad
from kvtui.widgets.palette import COMPONENT_CLASSES, role_css

# (marker kind, glyph, colour role (kvtui/widgets/palette.py)), the most important first
MARKS = (
    ("preempt", "P", "preempt"),
    ("edit", "E", "edit"),
    ("eviction", "x", "eviction"),
    ("miss", "m", "miss"),
    ("arrival", "A", "arrival"),
)
# the bar: done up to the knob (`used`), still to play (`free`)
DONE, TODO, KNOB = "used", "free", "knob"


class Scrubber(Themed, Widget):
    COMPONENT_CLASSES = COMPONENT_CLASSES
    # the screen's background, made the scrubber's own: its roles' `auto` colours resolve against it
    DEFAULT_CSS = "Scrubber { height: 2; background: $background; }\n" + role_css("Scrubber")

    class Seek(Message):
        def __init__(self, index: int):
            super().__init__()
            self.index = index

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.total = 0
        self.cursor = 0
        self.markers: dict[str, list[int]] = {}

    def update_position(self, cursor: int, total: int, markers: dict[str, list[int]]) -> None:
        self.cursor, self.total, self.markers = cursor, total, markers
        self.refresh()

    def column_of(self, index: int, width: int) -> int:
        return 0 if self.total <= 0 else min(width - 1, index * width // max(1, self.total))

    def render_line(self, y: int) -> Strip:
        width = self.size.width or 80
        if y == 0:
            return self._marker_line(width).apply_style(self.rich_style)
        if y == 1:
            knob = self.column_of(self.cursor, width)
            palette = self.palette()
            return pad(
                [
                    Segment("━" * knob, palette[DONE]),
                    Segment("●", palette[KNOB]),
                    Segment("─" * (width - knob - 1), palette[TODO]),
                ],
                width,
            ).apply_style(self.rich_style)
        return Strip.blank(width, self.rich_style)

    def _marker_line(self, width: int) -> Strip:
        if not self.total:
            return pad([Segment("(empty trace)", self.palette()["dim"])], width)
        key = (self.total, width, tuple(len(v) for v in self.markers.values()), self.palette())
        if key == getattr(self, "_marker_key", None):
            return self._marker_strip
        self._marker_key = key
        self._marker_strip = self._build_markers(width)
        return self._marker_strip

    def _build_markers(self, width: int) -> Strip:
        cells: list[Segment | None] = [None] * width
        palette = self.palette()
        # most important last, so it wins
        for kind, glyph, role in reversed(MARKS):
            style = palette[role]
            for index in self.markers.get(kind, ()):
                cells[self.column_of(index, width)] = Segment(glyph, style)
        return pad([c or Segment(" ") for c in cells], width)

    def on_click(self, event) -> None:
        width = self.size.width or 80
        if self.total:
            self.post_message(self.Seek(round(event.x * self.total / max(1, width - 1))))
