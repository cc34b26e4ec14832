"""What every view shares: the `View` it draws (state + selection), the Line-API base class, colors, formats.

Views never hold engine objects; they draw a `CacheState`. Each is a `LineView`: `render_row(row, width)`
builds one line as a `Strip` from the state, so only visible lines are ever built (a 16k-block pool or a
10k-request timeline costs what the screen shows). Tests call `render_line(y)` directly, no app needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.content import Content
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

from kvtui.state import CACHED, FREE, SHARED, USED, WRITING, CacheState
from kvtui.widgets.palette import COMPONENT_CLASSES, Palette, role_css, theme_palette


@dataclass
class View:
    """What the views draw: a state and what the user selected in it."""

    state: CacheState | None = None
    request_id: str | None = None
    block: int | None = None
    # radix node selected in the tree: its blocks are highlighted in the pool
    node_id: int | None = None

    @property
    def request(self):
        if self.state is None or self.request_id is None:
            return None
        return self.state.requests.get(self.request_id)


STATE_GLYPH = {FREE: "·", USED: "■", SHARED: "2", CACHED: "□", WRITING: "▶"}
# the colour role of each block state (kvtui/widgets/palette.py): the same role names in every view
STATE_ROLE = {FREE: "free", USED: "used", SHARED: "shared", CACHED: "cached", WRITING: "writing"}


def show_text(text: str) -> str:
    """A token's text made visible on one line: newlines and tabs as symbols."""
    return text.replace("\n", "⏎").replace("\t", "⇥").replace("\r", "␍")


# a token that is part of a character carries its bytes as \xe6\x97 (engine/models/text.py)
_BYTE_RUN = re.compile(r"(?:\\x[0-9a-f]{2})+")


def join_texts(texts) -> str:
    """Tokens' texts joined as the stream text shows them: the bytes of a character split over several tokens
    (\xe6\x97 then \xa5) become the character (日); bytes that make no character stay escaped."""
    text = "".join(texts)
    if "\\x" not in text:
        return text
    out, pos = bytearray(), 0
    for run in _BYTE_RUN.finditer(text):
        out += text[pos : run.start()].encode()
        out += bytes.fromhex(run.group().replace("\\x", ""))
        pos = run.end()
    out += text[pos:].encode()
    return out.decode("utf-8", errors="backslashreplace")


def character_of(texts: list[str], pos: int) -> str | None:
    """The character(s) a token that is only bytes belongs to, joined with its neighbours that are only bytes
    too; None for a token with text of its own."""
    if not _BYTE_RUN.fullmatch(texts[pos]):
        return None
    start, end = pos, pos + 1
    while start > 0 and _BYTE_RUN.fullmatch(texts[start - 1]):
        start -= 1
    while end < len(texts) and _BYTE_RUN.fullmatch(texts[end]):
        end += 1
    return join_texts(texts[start:end])


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


def wrap_segments(segments: list[Segment], width: int, indent: str = "") -> list[Strip]:
    """Styled text wrapped at spaces into strips of `width` cells (a word longer than a line is cut)."""
    lines: list[list[Segment]] = [[]]
    used = 0
    for seg in segments:
        for word in re.findall(r"\S+\s*|\s+", seg.text):
            if used and used + cell_len(word.rstrip()) > width:
                lines.append([Segment(indent)] if indent else [])
                used = len(indent)
                word = word.lstrip() if not used else word
            lines[-1].append(Segment(word, seg.style))
            used += cell_len(word)
    return [pad(line, width) for line in lines]


def fit_segments(segments: list[Segment], width: int) -> Strip:
    """One row of `width` cells; text that does not fit ends at the last whole word, with "…" (never mid-word)."""
    strip = Strip(list(Segment.simplify(segments)))
    if strip.cell_length <= width:
        return pad(segments, width)
    text = "".join(seg.text for seg in segments)
    cut = text.rfind(" ", 0, width)
    cut = cut if cut > width // 2 else width - 1
    style = segments[-1].style if segments else None
    return pad([*strip.crop(0, cell_len(text[:cut])), Segment("…", style)], width)


class Themed:
    """Mixin for a widget that draws its own segments: its looks are the palette's roles, read from its component
    classes (theme variables, see kvtui/widgets/palette.py) once per theme, not per line or cell.

    The widget class sets `COMPONENT_CLASSES = COMPONENT_CLASSES` and `DEFAULT_CSS = role_css(<its name>)`
    itself (Textual reads both from DOM classes only, not from a mixin). A subclass keeps the palette in its cache keys (`self.palette()` is a new object only when the looks
    changed), so a theme switch rebuilds cached lines.
    """

    _palette: Palette | None = None
    _stale_palette: Palette | None = None

    def palette(self) -> Palette:
        if self._palette is None:
            try:
                palette = Palette.of(self)
            except KeyError:
                # not mounted yet (views drawn directly in tests): the default theme's looks
                palette = theme_palette()
            old = self._stale_palette
            # unchanged looks (a focus change restyles too) keep the old object: cached lines stay valid
            self._palette = old if old is not None and old.styles == palette.styles else palette
        return self._palette

    def notify_style_update(self) -> None:
        """Called by Textual when the widget's own styles changed: read the roles again at the next draw."""
        super().notify_style_update()
        if self._palette is not None:
            self._stale_palette, self._palette = self._palette, None

    def on_mount(self) -> None:
        # a theme switch changes the component styles without a style update of the widget itself
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, theme) -> None:
        self.notify_style_update()
        self.refresh()


class LineView(Themed, ScrollView, can_focus=True):
    """A scrollable view drawn line by line from a `View`."""

    COMPONENT_CLASSES = COMPONENT_CLASSES
    DEFAULT_CSS = role_css("LineView")
    # used before the widget has a size (direct render_line calls in tests)
    DEFAULT_WIDTH = 80

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
        # recomputed once per frame, not once per line (it walks the DOM)
        self._base_style = None
        self.refresh()

    def on_resize(self) -> None:
        self.refresh_rows()

    def on_focus(self) -> None:
        self.refresh_rows()

    def on_blur(self) -> None:
        self.refresh_rows()

    _base_style: Style | None = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._base_style = None

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
        self._text: Content | Text | str = ""

    def set(self, text: Content | Text | str) -> None:
        if not same_text(text, self._text):
            self._text = text
            self.refresh()

    def render(self) -> Content | Text | str:
        return self._text


def same_text(a, b) -> bool:
    """Equal text and styles (Content's == compares the text only; its styles are theme roles)."""
    if isinstance(a, Content) and isinstance(b, Content):
        return a.is_same(b)
    return type(a) is type(b) and a == b


def update_if_changed(static, text: Content | Text | str) -> None:
    """Static.update only when the content changed (it triggers a layout pass)."""
    if not same_text(getattr(static, "_kvtui_last", None), text):
        static._kvtui_last = text
        static.update(text)


def plural(n: int, word: str) -> str:
    """`1 token`, `2 tokens`: a count with its noun."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def typed_words(req, sep: str) -> str:
    """The tokens after the prompt that an edit typed in, when there are any: not generated by the model (the
    requests tab and the tokens tab say the same)."""
    return f"{sep}typed {req.num_typed}" if req.num_typed else ""
