"""The radix prefix tree as flattened, virtualised rows (one per node, depth-first).

Each row: tree guide, the node's token run as text, its blocks, hits, lock refs and last access. A node that
was just inserted, hit or split is marked for a few events; recent evictions are listed under the tree.
Textual's Tree widget rebuilds every line on change; this view only builds the visible rows.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.strip import Strip

from kvtui.state import CacheState
from kvtui.widgets.base import BOLD, CURSOR, DIM, HEADING, LineView, fmt_seconds, pad, show_text

RECENT_EVENTS = 64  # how long (in events) a node keeps its insert / hit / split mark
MARK_STYLE = {"insert": Style(color="#111111", bgcolor="#59b26a", bold=True),
              "hit": Style(color="#111111", bgcolor="#4e9ad6", bold=True),
              "split": Style(color="#111111", bgcolor="#e5c07b", bold=True)}
MAX_INDENT = 24


class RadixTreeView(LineView):
    BINDINGS = [
        Binding("up", "move(-1)", "node up", show=False, id="tree.up"),
        Binding("down", "move(1)", "node down", show=False, id="tree.down"),
        Binding("pageup", "move(-10)", "page up", show=False, id="tree.pageup"),
        Binding("pagedown", "move(10)", "page down", show=False, id="tree.pagedown"),
    ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cursor = 0
        self._rows: list[tuple[int, int]] = []
        self._rows_key: tuple | None = None

    def rows(self) -> list[tuple[int, int]]:
        state = self.view.state
        if state is None:
            return []
        key = (id(state), state.index)
        if key != self._rows_key:
            self._rows, self._rows_key = state.radix_rows(), key
        return self._rows

    def row_count(self, width: int) -> int:
        state = self.view.state
        if state is None:
            return 1
        extra = 1 + len(state.evicted_nodes) if state.evicted_nodes else 0
        return 1 + max(1, len(self.rows())) + extra

    def render_row(self, row: int, width: int) -> Strip:
        state = self.view.state
        if state is None:
            return pad([Segment("no trace yet", DIM)], width)
        rows = self.rows()
        if row == 0:
            locked = sum(1 for n in state.nodes.values() if n.lockers)
            return pad([Segment(f"root · {len(rows)} nodes · {locked} locked · {state.evictions} blocks evicted",
                                HEADING)], width)
        row -= 1
        if row < len(rows):
            return self._node_row(state, row, width)
        if not rows and row == 0:
            return pad([Segment("  (empty: nothing cached yet)", DIM)], width)
        row -= max(1, len(rows))
        if row == 0:
            return pad([Segment("recently evicted (newest last):", HEADING)], width)
        node_id, t, text = state.evicted_nodes[row - 1]
        return pad([Segment(f"  ✗ n{node_id} ", Style(color="#b03a48", bold=True)),
                    Segment(show_text(text), DIM), Segment(f"  at {t:.2f}s", DIM)], width)

    def _node_row(self, state: CacheState, index: int, width: int) -> Strip:
        depth, node_id = self._rows[index]
        node = state.nodes[node_id]
        indent = "│ " * min(depth, MAX_INDENT // 2)
        if depth > MAX_INDENT // 2:
            indent = f"…{depth:>3}" + indent[4:]
        recent = state.seq - node.mark_seq <= RECENT_EVENTS and node.mark
        segs = [Segment(indent, DIM), Segment("├ ", DIM)]
        if recent:
            segs.append(Segment(f"{node.mark}", MARK_STYLE[node.mark]))
            segs.append(Segment(" "))
        right = (f"  n{node_id} P{','.join(map(str, node.blocks[:4]))}{'…' if len(node.blocks) > 4 else ''}"
                 f" hits {node.hits} lock {len(node.lockers)} {fmt_seconds(max(0.0, state.t - node.last_access))} ago")
        used = sum(s.cell_length for s in segs)
        room = max(8, width - used - len(right))
        text = "".join(show_text(t) for t in node.texts)
        if len(text) > room:
            text = text[:room - 1] + "…"
        style = BOLD if node.lockers else Style()
        if index == self.cursor and self.has_focus:
            style = style + CURSOR
        segs.append(Segment(text.ljust(room), style))
        segs.append(Segment(right, DIM))
        return pad(segs, width)

    def action_move(self, delta: int) -> None:
        self.cursor = max(0, min(len(self.rows()) - 1, self.cursor + delta))
        self.scroll_to_row(self.cursor + 1)
        self.refresh()
