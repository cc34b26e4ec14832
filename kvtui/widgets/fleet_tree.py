"""The prefix tree of an attached fleet: block hashes chained by parent hash, with each block's tokens (text
with --tokenizer, else ids) and the workers that hold it. A chain of blocks with one child each and the same
holders is one row (as a radix node is), so a long shared prompt is one line; a prefix held by several workers
(duplicated across replicas) is marked xN. A chain held anywhere but on the GPU names its tiers after the holders
(`CPU`, `GPU+CPU`; per holder when they differ). Blocks whose parent was never seen (stored before we joined, or lost
in a gap), and an offloading tier's blocks stored without token ids, hang under "parent not seen". The rows come built in a `FleetView` (kvtui/state/fleet_view.py).
"""

from __future__ import annotations

from rich.segment import Segment
from textual.strip import Strip

from kvtui.state.fleet_tiers import GPU
from kvtui.state.fleet_view import MAX_ROWS, FleetView, TreeRow
from kvtui.widgets.base import LineView, pad, show_text


def tier_label(row: TreeRow) -> str:
    """Where a row's holders keep its chain, when anywhere but the GPU alone: `CPU`, `GPU+CPU`, or per holder
    (`a:GPU b:CPU`) when they differ."""
    if not row.tiers or all(t == GPU for t in row.tiers):
        return ""
    if len(set(row.tiers)) == 1:
        return row.tiers[0]
    return " ".join(f"{w}:{t}" for w, t in zip(row.holders, row.tiers))


class FleetTreeView(LineView):
    """The tree rows of the latest view that carried them; a cursor selects a row."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rows: list[TreeRow] = []
        self.multi_group = False

    def update_fleet(self, view: FleetView | None) -> None:
        """Take the rows of a view that carries them (views built for the other tabs carry none)."""
        if view is None or view.tree is None:
            return
        self.rows = view.tree
        self.multi_group = len({r.group for r in self.rows}) > 1
        self.refresh_rows()

    def row_count(self, width: int) -> int:
        return len(self.rows) + 1

    def render_row(self, row: int, width: int) -> Strip:
        palette = self.palette()
        dim, heading = palette["dim"], palette["heading"]
        if row == 0:
            n = len(self.rows)
            more = f" (first {MAX_ROWS:,})" if n >= MAX_ROWS else ""
            return pad(
                [
                    Segment(
                        f"prefix tree over block hashes: {n:,} rows{more} · [holders] tiers (when not the GPU) "
                        f"blocks first-hash  tokens",
                        heading,
                    )
                ],
                width,
            )
        r = self.rows[row - 1]
        indent = "  " * min(r.depth, 30)
        segs = [Segment(indent + ("└ " if r.depth else ""), dim)]
        if r.orphan:
            segs.append(Segment("(parent not seen) ", dim))
        if self.multi_group:
            segs.append(Segment(f"g{r.group} ", dim))
        # a salted root: its prefix is cached apart from the same tokens unsalted
        if r.salt is not None:
            segs.append(Segment(f"salt={r.salt[:16]} ", palette["warning"]))
        elif r.depth == 0 and not r.orphan:
            segs.append(Segment("unsalted ", dim))
        # a prefix duplicated across workers: the `shared` role (held by several, as a shared block is)
        duplicated = palette["shared"]
        segs.append(Segment(f"[{','.join(r.holders)}]", duplicated if len(r.holders) > 1 else heading))
        if len(r.holders) > 1:
            segs.append(Segment(f" x{len(r.holders)}", duplicated))
        tiers = tier_label(r)
        if tiers:
            segs.append(Segment(f" {tiers}", palette["warning"]))
        segs += [
            Segment(f" {r.blocks} blk {r.first_hash[:8]} ", dim),
            Segment(show_text(r.text)[: max(0, width)]),
        ]
        return pad(segs, width)
