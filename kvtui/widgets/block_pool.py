"""The block pool: every physical block one cell, colored by state (or by owner), with a cursor.

A cell is two columns: a glyph and a gap. `■` in use (owner's color in owner mode), a digit = shared with that
ref count, `□` cached (ref 0, kept in the prefix tree, evictable), `·` free, `▶` being written this step.
After an edit the blocks named by the `invalidate` event are marked: kept, dropped, copied (the palette's roles
of those names, kvtui/widgets/palette.py). Rows start with the physical index of their first cell. With a host
tier, its slots follow the device's blocks (kvtui/widgets/tier_pool.py), and the cursor runs on into them.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.content import Content
from textual.message import Message
from textual.strip import Strip

from kvtui.state import CACHED, FREE, SHARED, USED, WRITING, CacheState
from kvtui.widgets.base import STATE_GLYPH, STATE_ROLE, LineView, View, fmt_bytes, fmt_seconds, pad, show_text
from kvtui.widgets.palette import Palette, markup, owner_markup
from kvtui.widgets.tier_pool import (
    PoolRow,
    cell_of,
    num_cells,
    pool_rows,
    row_of_cell,
    slot_at,
    slot_details,
    tier_legend,
    tier_row_segments,
)

CELL = 2
# "12345 " row label
MARGIN = 6


# how long (trace time) the pool keeps showing the last edit boundary
EDIT_MARK_SECONDS = 3.0


def edit_marks(state: CacheState) -> dict[int, str]:
    """Blocks named by the last invalidate event, while it is recent: physical -> kept | dropped | copied."""
    inv = state.last_invalidate
    if inv is None or state.t - inv["t"] > EDIT_MARK_SECONDS:
        return {}
    marks = {p: "kept" for p in inv["kept"]}
    marks.update({p: "dropped" for p in inv["dropped"]})
    marks.update({pair[1]: "copied" for pair in inv["copied"] if len(pair) == 2})
    return marks


class BlockPoolView(LineView):
    BINDINGS = [
        Binding("left", "move(-1)", "block left", show=False, id="pool.left"),
        Binding("right", "move(1)", "block right", show=False, id="pool.right"),
        Binding("up", "move_row(-1)", "block up", show=False, id="pool.up"),
        Binding("down", "move_row(1)", "block down", show=False, id="pool.down"),
        Binding("home", "jump(0)", "first block", show=False, id="pool.home"),
        Binding("end", "jump(-1)", "last block", show=False, id="pool.end"),
        Binding("o", "toggle_owner", "color by owner", show=False, id="pool.owner_mode"),
        Binding("w", "toggle_group", "color by KV-cache group", show=False, id="pool.group_mode"),
        Binding("enter", "select_owner", "select owner", show=False, id="pool.select_owner"),
    ]

    class ModeChanged(Message):
        """The cells' colors mean something else now (the legend follows)."""

    class BlockSelected(Message):
        def __init__(self, physical: int, request_id: str | None):
            super().__init__()
            self.physical = physical
            self.request_id = request_id

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cursor = 0
        self.by_owner = False
        # window_layout="paged": each block in its KV-cache group's color
        self.by_group = False

    def columns(self, width: int) -> int:
        return max(1, (width - MARGIN) // CELL)

    def get_content_height(self, container, viewport, width: int) -> int:
        """As many rows as the pool needs (the CSS caps it), so a small pool leaves room below."""
        return self.row_count(width)

    def row_count(self, width: int) -> int:
        state = self.view.state
        if state is None or not state.num_blocks:
            return 1
        if not state.tier_slots:
            return -(-state.num_blocks // self.columns(width))
        return len(self.rows(state, width))

    def rows(self, state: CacheState, width: int) -> list[PoolRow]:
        """The grid's rows: the device's blocks, then each lower tier's heading and slots."""
        key = (id(state), state.index, width)
        if key != getattr(self, "_rows_key", None):
            self._rows, self._rows_key = pool_rows(state, self.columns(width)), key
        return self._rows

    def cell_style(
        self, state: CacheState, p: int, kind: str, palette: Palette | None = None
    ) -> tuple[str, Style]:
        palette = palette or self.palette()
        glyph, style = STATE_GLYPH[kind], palette[STATE_ROLE[kind]]
        if kind == SHARED:
            ref = state.ref[p]
            glyph = str(ref) if ref < 10 else "+"
        if self.by_group and kind != FREE and state.block_group and state.block_group[p] >= 0:
            style = palette.owner(state.block_group[p]) + Style(bold=kind != USED, dim=kind == CACHED)
        elif self.by_owner and kind in (USED, SHARED, WRITING) and state.owners[p]:
            req = state.requests.get(state.owners[p][0][0])
            if req is not None:
                style = palette.owner(req.ordinal) + Style(bold=kind != USED, underline=kind == SHARED)
        return glyph, style

    def render_row(self, row: int, width: int) -> Strip:
        state = self.view.state
        palette = self.palette()
        dim = palette["dim"]
        if state is None:
            return pad([Segment("no trace yet", dim)], width)
        kept, dropped, copied, node_block = (
            palette["kept"],
            palette["dropped"],
            palette["copied"],
            palette["node"],
        )
        cursor_style = palette["cursor"]
        cols = self.columns(width)
        if state.tier_slots:
            grid_row = self.rows(state, width)[row] if row < len(self.rows(state, width)) else None
            if grid_row is None:
                return pad([], width)
            if grid_row.tier != "device":
                cursor = slot_at(state, self.cursor)
                segs = tier_row_segments(state, grid_row, cols, MARGIN, palette, cursor, self.has_focus)
                return pad(segs, width)
            row = grid_row.first // cols
        first = row * cols
        segments = [Segment(f"{first:>{MARGIN - 1}} ", dim)]
        marks = edit_marks(state)
        selected = (
            set(self.view.state.tables.get(self.view.request_id or "", ())) if self.view.request_id else set()
        )
        node = state.nodes.get(self.view.node_id) if self.view.node_id is not None else None
        node_blocks = set(node.blocks) if node is not None else ()
        focused = self.has_focus
        for p in range(first, min(first + cols, state.num_blocks)):
            kind = state.block_state(p)
            glyph, style = self.cell_style(state, p, kind, palette)
            mark = marks.get(p)
            if mark == "kept":
                style = kept
            elif mark == "dropped":
                style, glyph = dropped, "×" if kind in (FREE, CACHED) else glyph
            elif mark == "copied":
                style = copied
            if p in node_blocks:
                style = style + node_block
            if p == self.cursor:
                style = style + cursor_style if focused else style + Style(underline=True)
            if p in selected and p + 1 not in selected:
                segments.append(Segment(glyph, style))
                segments.append(Segment("▕", dim))
            elif style.bgcolor is None and not style.reverse and not style.underline:
                # same style: merges with its neighbours
                segments.append(Segment(glyph + " ", style))
            else:
                segments.append(Segment(glyph, style))
                segments.append(Segment(" ", dim))
        return pad(segments, width)

    # --- cursor
    def _set_cursor(self, p: int) -> None:
        state = self.view.state
        if state is None or not state.num_blocks:
            return
        width = self.content_width()
        self.cursor = max(0, min(num_cells(state) - 1, p))
        cols = self.columns(width)
        self.scroll_to_row(
            row_of_cell(state, self.rows(state, width), self.cursor, cols)
            if state.tier_slots
            else self.cursor // cols
        )
        self.refresh()
        owners = state.owners[self.cursor] if self.cursor < state.num_blocks else ()
        self.post_message(self.BlockSelected(self.cursor, owners[0][0] if owners else None))

    def action_move(self, delta: int) -> None:
        self._set_cursor(self.cursor + delta)

    def action_move_row(self, delta: int) -> None:
        self._set_cursor(self.cursor + delta * self.columns(self.content_width()))

    def action_jump(self, where: int) -> None:
        state = self.view.state
        self._set_cursor(where if where >= 0 or state is None else num_cells(state) - 1)

    def action_toggle_owner(self) -> None:
        self.by_owner = not self.by_owner
        self.by_group = False
        self.refresh()

    def action_toggle_group(self) -> None:
        state = self.view.state
        if state is None or not state.kv_groups:
            self.notify(
                "one KV-cache group: group colors are for window_layout='paged' (--window-layout paged)"
            )
            return
        self.by_group = not self.by_group
        self.by_owner = False
        # the legend names the groups' colors
        self.post_message(self.ModeChanged())
        self.refresh()

    def action_select_owner(self) -> None:
        self._set_cursor(self.cursor)

    def on_click(self, event) -> None:
        width = self.content_width()
        x, y = event.x, event.y + int(self.scroll_offset.y)
        if x < MARGIN:
            return
        col = (x - MARGIN) // CELL
        cols = self.columns(width)
        state = self.view.state
        if col >= cols or state is None:
            return
        if not state.tier_slots:
            self._set_cursor(y * cols + col)
            return
        rows = self.rows(state, width)
        if y < len(rows) and rows[y].first >= 0:
            grid_row = rows[y]
            if grid_row.tier == "device":
                self._set_cursor(grid_row.first + col)
            else:
                self._set_cursor(cell_of(state, grid_row.tier, grid_row.first + col))


def pool_legend(state: CacheState | None, view: View | None = None, by_group: bool = False) -> Content:
    """One line: the glyphs the grid uses with their counts (and the tree node highlighted, if any); with
    `by_group`, each KV-cache group's color with its blocks held and cached."""
    if state is None:
        return Content.styled("waiting for the trace header…", markup("dim"))
    if by_group and state.kv_groups:
        return group_legend(state)
    # each block counted once, in the state its cell is drawn in
    counts = state.counts_by_state()
    parts: list = []
    for glyph, kind in (("■", USED), ("2", SHARED), ("□", CACHED), ("·", FREE), ("▶", WRITING)):
        parts += [(glyph, markup(STATE_ROLE[kind])), f" {kind} {counts[kind]}  "]
    parts += tier_legend(state)
    parts.append((f"{state.num_blocks}×{state.block_size} tok", markup("dim")))
    if state.kv_dtype:
        parts.append((f" K/V {state.kv_dtype}", markup("dim")))
    node = state.nodes.get(view.node_id) if view is not None and view.node_id else None
    if node is not None:
        parts += ["  ", (f" tree n{node.node_id} ", markup("node"))]
    return Content.assemble(*parts)


def group_legend(state: CacheState) -> Content:
    """Each KV-cache group in its color: blocks held by requests, and cached (evictable); six groups fit 110
    columns."""
    parts: list = []
    for group, held, cached in state.group_counts():
        parts += [("■", owner_markup(group)), f" {state.group_label(group, short=True)} {held}■ {cached}□ "]
    parts.append(("(held■ cached□; w: states)", markup("dim")))
    return Content.assemble(*parts)


def edit_summary(state: CacheState | None, request_id: str | None) -> Content:
    """The last edit's boundary in one line (kept / dropped / copied blocks, recompute cost), or a hint."""
    inv = state.last_invalidate if state is not None else None
    dim = markup("dim")
    if inv is None or not edit_marks(state):
        parts: list = [("[ ] request · ←→↑↓ Enter: block, its owner · o owner colors · 3 tree · ? help", dim)]
        if state is not None and inv is not None:
            parts.append((f" · last edit: {inv['request_id']} at {inv['first_recomputed']}", dim))
        return Content.assemble(*parts)
    edit = state.last_edit if state.last_edit and state.last_edit["request_id"] == inv["request_id"] else {}
    return Content.assemble(
        (f"edit {inv['request_id']} {edit.get('kind', '')}@{edit.get('position', '?')} ", markup("bold")),
        (f" kept {len(inv['kept'])} ", markup("kept")),
        " ",
        (f" dropped {len(inv['dropped'])} ", markup("dropped")),
        " ",
        (f" copied {len(inv['copied'])} ", markup("copied")),
        f" reuse 0-{inv['first_recomputed'] - 1}, recompute {inv['recompute_tokens']} tok"
        if inv["first_recomputed"]
        else f" recompute all {inv['recompute_tokens']} tok",
    )


def block_details(state: CacheState | None, physical: int | None) -> Content:
    """What one block holds: state, ref count, owners (request:logical), hash, radix node, age, tokens."""
    dim = markup("dim")
    lower = slot_at(state, physical) if state is not None and physical is not None else None
    if lower is not None:
        return slot_details(state, *lower)
    if state is None or physical is None or not 0 <= physical < state.num_blocks:
        return Content.styled("Select a block (arrows in the pool, Enter selects its owner).", dim)
    kind = state.block_state(physical)
    parts: list = [
        (f"block P{physical}  ", markup("bold")),
        (kind, markup(STATE_ROLE[kind])),
        f"  ref {state.ref[physical]}\n",
    ]
    if state.block_group and state.block_group[physical] >= 0 and kind != FREE:
        parts.append(f"group {state.group_label(state.block_group[physical])}\n")
    owners = state.owners[physical]
    parts.append("owners: " + (", ".join(f"{rid}:L{logical}" for rid, logical in owners) or "none") + "\n")
    if state.block_hash[physical]:
        parts.append(f"hash {state.block_hash[physical]}\n")
    node = state.block_node.get(physical)
    if node is not None:
        parts.append(f"radix node n{node}\n")
    if kind != FREE:
        parts.append(f"age {fmt_seconds(max(0.0, state.t - state.born[physical]))}\n")
    ids, texts = state.block_tokens(physical)
    if ids:
        parts.append((f"tokens ({len(ids)}/{state.block_size}): ", dim))
        shades = (markup("token-a"), markup("token-b"))
        parts += [(show_text(text), shades[i % 2]) for i, text in enumerate(texts)]
        parts.append("\n")
    parts.append((f"{fmt_bytes(state.bytes_per_block)} of K/V", dim))
    if state.kv_dtype:
        parts.append((f", {state.kv_dtype}: 1 B a value + a float32 scale per token and KV head", dim))
    return Content.assemble(*parts)
