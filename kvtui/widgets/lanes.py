"""Lanes on a time axis, the drawing both requests tabs share (the engine's, kvtui/widgets/timeline.py, and the
attached proxy's, kvtui/widgets/proxy_lanes.py).

Row 0 is the axis (`0s ... END s`); every other row is one lane: a label, then one cell per column. A lane's
cells are painted from runs (a phase from one column up to the next: queued, running, waiting for the first
token) and marks (a point event; where two marks share a column, the higher priority wins). The selected lane's
label is drawn reversed; up / down move the selection and a click selects a lane. A subclass says what the lanes
are (`lane_ids`, `lane`, `axis_end`) and what a selection means (`select`).
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.strip import Strip

from kvtui.widgets.base import LineView, pad
from kvtui.widgets.palette import Palette

LABEL = 10
# one column of a lane: its glyph and style
Cell = tuple[str, Style]
BLANK: Cell = (" ", Style())


def column(t: float, span: float, cols: int) -> int:
    """The column of time `t` on an axis of `span` seconds drawn over `cols` columns."""
    return max(0, min(cols - 1, int(t / span * cols)))


def paint(
    cols: int, runs: Iterable[tuple[int, int, Cell]], marks: Iterable[tuple[int, int, Cell]]
) -> list[Cell]:
    """A lane's cells: each run `(first, end, cell)` fills columns first..end-1 (later runs over earlier
    ones), then each mark `(column, priority, cell)` replaces its column's cell unless a higher mark is there."""
    cells: list[Cell | None] = [None] * cols
    for first, end, cell in runs:
        for c in range(max(0, first), min(cols, end)):
            cells[c] = cell
    best = [-1] * cols
    for c, priority, cell in marks:
        if 0 <= c < cols and priority > best[c]:
            best[c] = priority
            cells[c] = cell
    return [cell or BLANK for cell in cells]


def short_label(lane_id: str, width: int) -> str:
    """The id cut from the left: numbered ids (proxy-1199, proxy-1#1201) differ at their end."""
    return lane_id if len(lane_id) <= width else "…" + lane_id[-(width - 1) :]


class LanesView(LineView):
    BINDINGS = [
        Binding("up", "move(-1)", "request up", show=False, id="lanes.up"),
        Binding("down", "move(1)", "request down", show=False, id="lanes.down"),
    ]
    # what the view says when it has nothing to draw
    EMPTY = "no trace yet"

    # ------------------------------------------------------------------ what a subclass provides
    def lane_ids(self) -> list[str]:
        return []

    def selected_id(self) -> str | None:
        return None

    def axis_end(self) -> float | None:
        """Seconds the axis spans; None: nothing to draw yet."""
        return None

    def lane(self, lane_id: str, span: float, cols: int, palette: Palette) -> tuple[Style, list[Cell]]:
        """A lane's label style and its cells."""
        return Style(), [BLANK] * cols

    def select(self, lane_id: str) -> None:
        """The user chose this lane (a subclass posts its message)."""

    # ------------------------------------------------------------------ drawing
    def row_count(self, width: int) -> int:
        return 1 + (len(self.lane_ids()) if self.axis_end() is not None else 0)

    def render_row(self, row: int, width: int) -> Strip:
        palette = self.palette()
        dim = palette["dim"]
        end = self.axis_end()
        if end is None:
            return pad([Segment(self.EMPTY, dim)], width)
        span = max(end, 1e-9)
        cols = max(1, width - LABEL)
        if row == 0:
            axis = f"0s{'':{max(0, cols - 12)}}{end:.2f}s"
            return pad(
                [Segment(f"{'request':<{LABEL}}", palette["heading"]), Segment(axis[:cols], dim)], width
            )
        lane_id = self.lane_ids()[row - 1]
        label_style, cells = self.lane(lane_id, span, cols, palette)
        if lane_id == self.selected_id():
            label_style += palette["cursor"]
        segs = [Segment(f"{short_label(lane_id, LABEL - 1):<{LABEL - 1}} ", label_style)]
        segs += [Segment(glyph, style) for glyph, style in cells]
        return pad(segs, width)

    # ------------------------------------------------------------------ selecting
    def on_resize(self) -> None:
        """Keep the selected lane in sight when the view gets its size (its tab shown, the terminal resized):
        a selection made while the tab was hidden (the latest arrival, followed) could not scroll it then.
        (LineView.on_resize, which sizes the rows, runs too: Textual calls each class's handler.)"""
        self.call_after_refresh(self.show_selected)

    def show_selected(self) -> None:
        ids = self.lane_ids()
        selected = self.selected_id()
        if self.axis_end() is not None and selected in ids:
            self.scroll_to_row(ids.index(selected) + 1)

    def action_move(self, delta: int) -> None:
        ids = self.lane_ids()
        if self.axis_end() is None or not ids:
            return
        selected = self.selected_id()
        i = ids.index(selected) if selected in ids else -1
        i = max(0, min(len(ids) - 1, i + delta))
        self.scroll_to_row(i + 1)
        self.select(ids[i])

    def on_click(self, event) -> None:
        ids = self.lane_ids()
        row = event.y + int(self.scroll_offset.y) - 1
        if self.axis_end() is not None and 0 <= row < len(ids):
            self.select(ids[row])
