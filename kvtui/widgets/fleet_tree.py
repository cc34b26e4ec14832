"""The prefix tree of an attached fleet: block hashes chained by parent hash, with each block's tokens (text
with --tokenizer, else ids) and the workers that hold it. A chain of blocks with one child each and the same
holders is one row (as a radix node is), so a long shared prompt is one line; a prefix held by several workers
(duplicated across replicas) is marked xN. Blocks whose parent was never seen (stored before we joined, or lost
in a gap) hang under "parent not seen". Rows are rebuilt only when the tree changed (`FleetState.version`).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from kvtui.state.fleet import FleetState, Node
from kvtui.widgets.base import DIM, HEADING, LineView, pad, show_text

MAX_ROWS = 2_000  # rows built per rebuild (the first ones, depth first): a frame stays cheap
DUP = Style(color="#111111", bgcolor="#e5c07b", bold=True)
GONE = Style(color="#7f7f7f", strike=True)


@dataclass
class TreeRow:
    depth: int
    group: int
    nodes: list  # the chain of Nodes this row stands for
    holders: tuple  # workers holding every block of the chain
    orphan: bool = False


def _chain(fleet: FleetState, node: Node) -> list[Node]:
    chain = [node]
    while True:
        kids = fleet.children.get((node.group, node.hash))
        if not kids or len(kids) != 1:
            return chain
        child = fleet.nodes.get((node.group, next(iter(kids))))
        if child is None or set(child.holders) != set(node.holders):
            return chain
        chain.append(child)
        node = child


def tree_rows(fleet: FleetState, limit: int = MAX_ROWS) -> list[TreeRow]:
    """The visible rows, depth first (held blocks only; removed ones are kept for the explainer)."""
    rows: list[TreeRow] = []
    groups = sorted({key[0] for key in fleet.nodes})
    roots = [(g, fleet.nodes[(g, h)], False) for g in groups for h in fleet.children.get((g, None), ())]
    roots += [(key[0], fleet.nodes[key], True) for key in fleet.orphans if key in fleet.nodes]
    stack = [(0, g, n, orphan) for g, n, orphan in reversed(roots)]
    while stack and len(rows) < limit:
        depth, group, node, orphan = stack.pop()
        if not node.holders:
            continue
        chain = _chain(fleet, node)
        rows.append(TreeRow(depth, group, chain, tuple(sorted(node.holders)), orphan))
        last = chain[-1]
        kids = [fleet.nodes[(group, h)] for h in fleet.children.get((group, last.hash), ())
                if (group, h) in fleet.nodes]
        stack.extend((depth + 1, group, k, False) for k in reversed(kids))
    return rows


def row_text(row: TreeRow) -> str:
    parts = []
    for node in row.nodes:
        parts.append("".join(node.texts) if node.texts else " ".join(map(str, node.token_ids)))
    return show_text(" | ".join(parts) if not row.nodes[0].texts else "".join(parts))


class FleetTreeView(LineView):
    """The tree rows, built by `update_fleet` when the tree changed; a cursor selects a row."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rows: list[TreeRow] = []
        self.fleet: FleetState | None = None
        self._version = -1
        self.multi_group = False

    def update_fleet(self, fleet: FleetState | None, force: bool = False) -> None:
        if fleet is None:
            return
        if force or fleet is not self.fleet or fleet.version != self._version:
            self.fleet, self._version = fleet, fleet.version
            self.rows = tree_rows(fleet)
            self.multi_group = len({r.group for r in self.rows}) > 1
        self.refresh_rows()

    def row_count(self, width: int) -> int:
        return len(self.rows) + 1

    def render_row(self, row: int, width: int) -> Strip:
        if row == 0:
            n = len(self.rows)
            more = f" (first {MAX_ROWS:,})" if n >= MAX_ROWS else ""
            return pad([Segment(f"prefix tree over block hashes: {n:,} rows{more} · [holders] blocks "
                                f"first-hash  tokens", HEADING)], width)
        r = self.rows[row - 1]
        indent = "  " * min(r.depth, 30)
        segs = [Segment(indent + ("└ " if r.depth else ""), DIM)]
        if r.orphan:
            segs.append(Segment("(parent not seen) ", DIM))
        if self.multi_group:
            segs.append(Segment(f"g{r.group} ", DIM))
        segs.append(Segment(f"[{','.join(r.holders)}]", DUP if len(r.holders) > 1 else HEADING))
        if len(r.holders) > 1:
            segs.append(Segment(f" x{len(r.holders)}", DUP))
        segs += [Segment(f" {len(r.nodes)} blk {r.nodes[0].hash[:8]} ", DIM), Segment(row_text(r)[:max(0, width)])]
        return pad(segs, width)
