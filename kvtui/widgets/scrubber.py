"""The scrubber: where the cursor is in the trace, with markers for arrivals, edits, evictions and misses.

Line 1 holds the markers (`A` arrival, `E` edit, `x` eviction, `m` miss, `P` preemption; the most important
one wins a column), line 2 the progress bar. Clicking seeks.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from kvtui.widgets.base import DIM, pad

MARKS = (("preempt", "P", Style(color="#ffffff", bgcolor="#b03a48", bold=True)),
         ("edit", "E", Style(color="#c26fd1", bold=True)),
         ("eviction", "x", Style(color="#d9596b")),
         ("miss", "m", Style(color="#e5c07b")),
         ("arrival", "A", Style(color="#4e9ad6")))
DONE = Style(color="#4e9ad6")
TODO = Style(color="#444444")
KNOB = Style(color="#ffffff", bold=True)


class Scrubber(Widget):
    DEFAULT_CSS = "Scrubber { height: 2; }"

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
            return self._marker_line(width)
        if y == 1:
            knob = self.column_of(self.cursor, width)
            return pad([Segment("━" * knob, DONE), Segment("●", KNOB), Segment("─" * (width - knob - 1), TODO)],
                       width)
        return Strip.blank(width)

    def _marker_line(self, width: int) -> Strip:
        if not self.total:
            return pad([Segment("(empty trace)", DIM)], width)
        key = (self.total, width, tuple(len(v) for v in self.markers.values()))
        if key == getattr(self, "_marker_key", None):
            return self._marker_strip
        self._marker_key = key
        self._marker_strip = self._build_markers(width)
        return self._marker_strip

    def _build_markers(self, width: int) -> Strip:
        cells: list[Segment | None] = [None] * width
        for kind, glyph, style in reversed(MARKS):  # most important last, so it wins
            for index in self.markers.get(kind, ()):
                cells[self.column_of(index, width)] = Segment(glyph, style)
        return pad([c or Segment(" ") for c in cells], width)

    def on_click(self, event) -> None:
        width = self.size.width or 80
        if self.total:
            self.post_message(self.Seek(round(event.x * self.total / max(1, width - 1))))

