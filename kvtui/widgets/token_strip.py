"""The token strip: the selected request's sequence (prompt + generated), wrapped, with a cursor.

Alternating shades show token boundaries (prompt and generated tokens in two role colours, see palette.py); each line starts with the position
of its first token. The cursor picks the token to replace, insert before, or delete; shift+arrows extend a
selection from it (replace and delete act on the whole selection). A finished request has one more cursor
place, the end slot after its last token (`END_SLOT`): an insert there adds a turn. After an edit, positions before the edit
point m keep their K/V (underlined); from m on everything is recomputed (the `recompute` role).
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.message import Message
from textual.strip import Strip

from kvtui.state import FINISHED
from kvtui.widgets.base import LineView, character_of, fmt_seconds, pad, plural, show_text, typed_words

MARGIN = 6
HEADER_ROWS = 3
# the place after a finished request's last token, drawn as one cell after it
END_SLOT = "▏"


class TokenStrip(LineView):
    BINDINGS = [
        Binding("left", "move(-1)", "token left", show=False, id="tokens.left"),
        Binding("right", "move(1)", "token right", show=False, id="tokens.right"),
        Binding("up", "move_line(-1)", "line up", show=False, id="tokens.up"),
        Binding("down", "move_line(1)", "line down", show=False, id="tokens.down"),
        Binding("home", "jump(0)", "first token", show=False, id="tokens.home"),
        Binding("end", "jump(-1)", "last token", show=False, id="tokens.end"),
        Binding("shift+left", "extend(-1)", "select left", show=False, id="tokens.select_left"),
        Binding("shift+right", "extend(1)", "select right", show=False, id="tokens.select_right"),
    ]

    class CursorMoved(Message):
        def __init__(self, position: int):
            super().__init__()
            self.position = position

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # None: the last token (follows generation)
        self.cursor: int | None = None
        # the other end of a shift+arrow selection (None: just the cursor)
        self.anchor: int | None = None
        # the request the selection was made in
        self._anchor_request: str | None = None
        self._layout_key: tuple | None = None
        self._layout: list[list[tuple[int, str]]] = []

    def layout(self, width: int) -> list[list[tuple[int, str]]]:
        """Tokens wrapped into lines of (position, shown text)."""
        state, req = self.view.state, self.view.request
        if state is None or req is None:
            return []
        key = (id(state), state.index, req.request_id, width)
        if key == self._layout_key:
            return self._layout
        room = max(4, width - MARGIN)
        lines: list[list[tuple[int, str]]] = [[]]
        used = 0
        for pos, text in enumerate(req.texts):
            shown = show_text(text) or "∅"
            shown = shown[:room]
            if used + len(shown) > room and lines[-1]:
                lines.append([])
                used = 0
            lines[-1].append((pos, shown))
            used += len(shown)
        if self.has_end_slot():
            if used + 1 > room and lines[-1]:
                lines.append([])
            lines[-1].append((req.num_tokens, END_SLOT))
        self._layout, self._layout_key = lines, key
        return lines

    def row_count(self, width: int) -> int:
        return HEADER_ROWS + max(1, len(self.layout(width)))

    def _edit_point(self) -> int | None:
        state, req = self.view.state, self.view.request
        inv = state.last_invalidate if state else None
        if inv is None or req is None or inv["request_id"] != req.request_id:
            return None
        return inv["first_recomputed"]

    def has_end_slot(self) -> bool:
        """A finished request: the cursor may also stand after its last token, where an insert adds a turn."""
        req = self.view.request
        return req is not None and req.status == FINISHED and req.num_tokens > 0

    def at_end_slot(self) -> bool:
        req = self.view.request
        return self.has_end_slot() and self.position() == req.num_tokens

    def position(self) -> int:
        """The cursor's token position, clamped to the sequence (the last token when unset); a finished
        request's end slot is position num_tokens."""
        req = self.view.request
        if req is None or not req.num_tokens:
            return 0
        last = req.num_tokens if self.has_end_slot() else req.num_tokens - 1
        return req.num_tokens - 1 if self.cursor is None else max(0, min(self.cursor, last))

    def selection(self) -> tuple[int, int]:
        """[start, end) of the selected tokens: the cursor's token, or the shift+arrow range; empty at the end
        slot."""
        pos = self.position()
        req = self.view.request
        if self.at_end_slot():
            return pos, pos
        if self.anchor is None or req is None or not req.num_tokens or req.request_id != self._anchor_request:
            return pos, pos + 1
        anchor = max(0, min(self.anchor, req.num_tokens - 1))
        return min(pos, anchor), max(pos, anchor) + 1

    def render_row(self, row: int, width: int) -> Strip:
        state, req = self.view.state, self.view.request
        palette = self.palette()
        dim = palette["dim"]
        if state is None or req is None:
            return pad(
                [
                    Segment(
                        "No request selected: type a prompt below, or [ and ] to pick one."
                        if row == 0
                        else "",
                        dim,
                    )
                ],
                width,
            )
        if row == 0:
            return pad(self._header(), width)
        if row == 1:
            return pad(self._cursor_line(), width)
        if row == 2:
            return pad(self._edit_line(), width)
        lines = self.layout(width)
        index = row - HEADER_ROWS
        if index >= len(lines):
            return pad([Segment("  (no tokens)", dim)], width)
        line = lines[index]
        m = self._edit_point()
        cursor = self.position()
        start, end = self.selection()
        prompt = (palette["prompt-a"], palette["prompt-b"])
        generated = (palette["generated-a"], palette["generated-b"])
        recompute, recompute_mark = palette["recompute"], palette["recompute-mark"]
        segs = [Segment(f"{line[0][0] if line else 0:>{MARGIN - 1}} ", dim)]
        for pos, shown in line:
            if pos == req.num_tokens:
                segs.append(Segment(shown, palette["token-cursor"] if pos == cursor else dim))
                continue
            style = (prompt if pos < req.prompt_len else generated)[pos % 2]
            if m is not None and pos >= m:
                style = recompute_mark if pos == m else style + recompute
            elif m is not None:
                style = style + Style(underline=True)
            # measured K/V precision: each token by how far its next-token distribution moved
            kl_bin = req.kl_bin(pos)
            if kl_bin is not None:
                style = palette[f"kl-{kl_bin}"]
            if pos == cursor:
                style = palette["token-cursor"]
            elif start <= pos < end:
                style = palette["selected"]
            segs.append(Segment(shown, style))
        return pad(segs, width)

    def _header(self) -> list[Segment]:
        req = self.view.request
        palette = self.palette()
        dim = palette["dim"]
        return [
            Segment(f"{req.request_id} ", palette.owner(req.ordinal) + palette["bold"]),
            Segment(f"{req.status_text} · {plural(req.num_tokens, 'token')}: ", dim),
            Segment(" prompt ", palette["prompt-b"]),
            Segment(f" {req.prompt_len} · ", dim),
            Segment(" generated ", palette["generated-b"]),
            Segment(f" {req.num_generated}{typed_words(req, ' · ')} · TTFT {fmt_seconds(req.ttft)}", dim),
        ]

    def _cursor_line(self) -> list[Segment]:
        state, req = self.view.state, self.view.request
        palette = self.palette()
        dim = palette["dim"]
        segs = [Segment("cursor ", dim)]
        pos = self.position()
        if self.at_end_slot():
            segs.append(Segment(f"pos {pos}, after the last token", palette["bold"]))
            segs.append(Segment(" · i inserts here: a new turn (live)", dim))
        elif req.num_tokens:
            logical = pos // state.block_size
            table = state.tables.get(req.request_id, [])
            where = (
                f"L{logical}→P{table[logical]}"
                if logical < len(table) and table[logical] >= 0
                else f"L{logical}"
            )
            typed = pos < len(req.typed) and req.typed[pos]
            part = "prompt" if pos < req.prompt_len else "typed" if typed else "generated"
            segs.append(
                Segment(
                    f"pos {pos} {show_text(req.texts[pos])!r} id {req.token_ids[pos]} ({part}, {where})",
                    palette["bold"],
                )
            )
            char = character_of(req.texts, pos)
            if char is not None:
                # a token that is a few bytes of a character (CJK, emoji): the character its bytes make
                segs.append(Segment(f" · bytes of {char!r}", dim))
            if req.kl_bin(pos) is not None:
                segs.append(Segment(f" · KL {req.kl[pos]:.2e} ({req.kl_dtype} vs exact)", dim))
            start, end = self.selection()
            if end - start > 1:
                segs.append(
                    Segment(f" · selected {start}-{end - 1} ({plural(end - start, 'token')}; shift+←→)", dim)
                )
        return segs

    def _edit_line(self) -> list[Segment]:
        state, req = self.view.state, self.view.request
        palette = self.palette()
        dim = palette["dim"]
        inv = state.last_invalidate
        if req.kl is not None and (inv is None or inv["request_id"] != req.request_id):
            return self._kl_legend()
        if inv is None or inv["request_id"] != req.request_id:
            return [
                Segment(
                    "←→↑↓ move · shift+←→ select · r replace · i insert before · d delete · f fork (live)",
                    dim,
                )
            ]
        edit = req.edits[-1] if req.edits else {}
        copied = ",".join(f"P{a}→P{b}" for a, b in inv["copied"]) or "-"
        return [
            Segment(f"edit {edit.get('kind', '?')}@{edit.get('position', '?')}", palette["edit"]),
            Segment(f" keep <{inv['first_recomputed']} ", dim),
            Segment("recompute", palette["recompute-mark"]),
            Segment(
                f" {inv['recompute_tokens']} tok · kept {_blocks(inv['kept'])} · dropped "
                f"{_blocks(inv['dropped'])} · copied {copied}",
                dim,
            ),
        ]

    def _kl_legend(self) -> list[Segment]:
        """The colours of a precision trace's tokens: KL divergence from the exact cache by decade."""
        req = self.view.request
        palette = self.palette()
        segs = [Segment(f"{req.kl_dtype} K/V, next-token KL vs exact: ", palette["dim"])]
        for i, label in enumerate(("< 1e-3", "< 1e-2", "< 1e-1", ">= 1e-1")):
            segs += [Segment(f" {label} ", palette[f"kl-{i}"]), Segment(" ")]
        measured = [v for v in req.kl if v is not None]
        if measured:
            segs.append(Segment(f"· mean {sum(measured) / len(measured):.2e}", palette["dim"]))
        return segs

    # --- cursor
    def set_cursor(self, position: int) -> None:
        req = self.view.request
        if req is None:
            return
        last = req.num_tokens if self.has_end_slot() else req.num_tokens - 1
        pos = max(0, min(last, position))
        # at the end: None follows new tokens
        self.cursor = None if pos == req.num_tokens - 1 else pos
        width = self.content_width()
        for i, line in enumerate(self.layout(width)):
            if line and line[0][0] <= pos <= line[-1][0]:
                self.scroll_to_row(i + HEADER_ROWS)
                break
        self.refresh()
        self.post_message(self.CursorMoved(self.cursor))

    def action_move(self, delta: int) -> None:
        self.anchor = None
        self.set_cursor(self.position() + delta)

    def action_extend(self, delta: int) -> None:
        """shift+arrow: grow or shrink the selection from where it started."""
        if self.anchor is None or self.view.request_id != self._anchor_request:
            self.anchor = self.position()
            self._anchor_request = self.view.request_id
        self.set_cursor(self.position() + delta)
        # at the end: keep the cursor there; a selection ends at the last token, not the end slot
        req = self.view.request
        if req is not None and (self.cursor is None or self.at_end_slot()):
            self.cursor = req.num_tokens - 1

    def selected_text(self) -> str:
        req = self.view.request
        start, end = self.selection()
        return "".join(req.texts[start:end]) if req is not None else ""

    def action_move_line(self, delta: int) -> None:
        self.anchor = None
        lines = self.layout(self.content_width())
        cursor = self.position()
        for i, line in enumerate(lines):
            if line and line[0][0] <= cursor <= line[-1][0]:
                j = max(0, min(len(lines) - 1, i + delta))
                column = cursor - line[0][0]
                target = lines[j]
                if target:
                    self.set_cursor(target[min(column, len(target) - 1)][0])
                return

    def action_jump(self, where: int) -> None:
        self.anchor = None
        req = self.view.request
        self.set_cursor(where if where >= 0 or req is None else req.num_tokens - 1)


def _blocks(blocks: list[int]) -> str:
    if not blocks:
        return "none"
    shown = ",".join(f"P{p}" for p in blocks[:6])
    return shown + (f"…(+{len(blocks) - 6})" if len(blocks) > 6 else "")
