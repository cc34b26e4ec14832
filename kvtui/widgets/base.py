"""What every view shares: the `View` it draws (state + selection), the Line-API base class, colors, formats.

Views never hold engine objects; they draw a `CacheState`. Each is a `LineView`: `render_row(row, width)`
builds one line as a `Strip` from the state, so only visible lines are ever built (a 16k-block pool or a
10k-request timeline costs what the screen shows). Tests call `render_line(y)` directly, no app needed.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

from kvtui.state import CACHED, FREE, SHARED, USED, WRITING, CacheState


@dataclass
class View:
    """What the views draw: a state and what the user selected in it."""

    state: CacheState | None = None
    request_id: str | None = None
    block: int | None = None
    node_id: int | None = None  # radix node selected in the tree: its blocks are highlighted in the pool

    @property
    def request(self):
        if self.state is None or self.request_id is None:
            return None
        return self.state.requests.get(self.request_id)


# Owner colors: by arrival order, so a request keeps its color across frames, runs and snapshot tests.
PALETTE = ("#4e9ad6", "#e07b39", "#59b26a", "#c26fd1", "#d4b93c", "#3fb8b0", "#d9596b", "#8d8fe0",
           "#9bc45a", "#b98a5e")

STATE_STYLE = {
    FREE: Style(color="#5a5a5a"),
    USED: Style(color="#4e9ad6"),
    SHARED: Style(color="#ffffff", bgcolor="#8a3fa0", bold=True),
    CACHED: Style(color="#59b26a"),
    WRITING: Style(color="#111111", bgcolor="#e5c07b", bold=True),
}
STATE_GLYPH = {FREE: "·", USED: "■", SHARED: "2", CACHED: "□", WRITING: "▶"}

DIM = Style(color="#7f7f7f")
BOLD = Style(bold=True)
HEADING = Style(color="#e5c07b", bold=True)
CURSOR = Style(reverse=True)
KEPT = Style(color="#111111", bgcolor="#59b26a")
DROPPED = Style(color="#ffffff", bgcolor="#b03a48", bold=True)
COPIED = Style(color="#111111", bgcolor="#3fb8b0", bold=True)
NODE_BLOCK = Style(bgcolor="#6b5410", bold=True)  # a block of the radix node selected in the tree


def owner_style(ordinal: int) -> Style:
    return Style(color=PALETTE[ordinal % len(PALETTE)])


def show_text(text: str) -> str:
    """A token's text made visible on one line: newlines and tabs as symbols."""
    return text.replace("\n", "⏎").replace("\t", "⇥").replace("\r", "␍")


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1:
        return f"{s * 1000:.1f}ms"
    return f"{s:.2f}s"


def pad(segments: list[Segment], width: int) -> Strip:
    """A strip of exactly `width` cells (runs of one style merged: fewer segments, faster paints)."""
    return Strip(list(Segment.simplify(segments))).adjust_cell_length(width).crop(0, width)


class LineView(ScrollView, can_focus=True):
    """A scrollable view drawn line by line from a `View`."""

    DEFAULT_WIDTH = 80  # used before the widget has a size (direct render_line calls in tests)

    def __init__(self, view: View | None = None, **kwargs):
        super().__init__(**kwargs)
        self.view = view or View()

    # subclasses implement these two
    def row_count(self, width: int) -> int:
        return 0

    def render_row(self, row: int, width: int) -> Strip:
        return Strip.blank(width)

    def content_width(self) -> int:
        return self.scrollable_content_region.width or self.size.width or self.DEFAULT_WIDTH

    def update_view(self, view: View) -> None:
        self.view = view
        self.refresh_rows()

    def refresh_rows(self) -> None:
        width = self.content_width()
        self.virtual_size = Size(width, self.row_count(width))
        self._base_style = None  # recomputed once per frame, not once per line (it walks the DOM)
        self.refresh()

    def on_resize(self) -> None:
        self.refresh_rows()

    def on_focus(self) -> None:
        self.refresh_rows()

    def on_blur(self) -> None:
        self.refresh_rows()

    _base_style: Style | None = None

    def base_style(self) -> Style:
        if self._base_style is None:
            self._base_style = self.rich_style
        return self._base_style

    def render_line(self, y: int) -> Strip:
        width = self.content_width()
        row = y + int(self.scroll_offset.y)
        if row >= self.row_count(width):
            return Strip.blank(width, self.base_style())
        return self.render_row(row, width).apply_style(self.base_style())

    def scroll_to_row(self, row: int) -> None:
        """Keep `row` visible (cursor following)."""
        height = self.scrollable_content_region.height or 1
        top = int(self.scroll_offset.y)
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + height:
            self.scroll_to(y=row - height + 1, animate=False)


class BuiltLinesView(LineView):
    """A view of a few dozen lines built all at once: subclasses implement `_lines(width)` (cached per frame)."""

    def _lines(self, width: int) -> list[Strip]:
        return []

    def row_count(self, width: int) -> int:
        return len(self._lines(width))

    def render_row(self, row: int, width: int) -> Strip:
        lines = self._lines(width)
        return lines[row] if row < len(lines) else Strip.blank(width)


class TextLine(Widget):
    """A fixed-height text widget that repaints without a relayout (Static.update relayouts the screen, which
    costs tens of ms per frame at 200x60 when it happens every frame)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._text: Text | str = ""

    def set(self, text: Text | str) -> None:
        if text != self._text:
            self._text = text
            self.refresh()

    def render(self) -> Text | str:
        return self._text


def update_if_changed(static, text: Text | str) -> None:
    """Static.update only when the content changed (it triggers a layout pass)."""
    if getattr(static, "_kvtui_last", None) != text:
        static._kvtui_last = text
        static.update(text)
