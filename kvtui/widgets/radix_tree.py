"""The radix prefix tree as flattened, virtualised rows (one per node, depth-first).

Each row: tree guide, the node's token run as text, its blocks, hits, lock refs and last access. A node that
was just inserted, hit, split or trimmed by eviction is marked for a few events; recent evictions are listed
under the tree. Siblings always start inside the same block (the tree branches at block granularity), so a
node with an earlier sibling shows where it parts from it: `…N=` for the N equal leading tokens, then the
first different token highlighted. Lock refs are derived from the events: a request that hit or inserted a
node holds it until it finishes. The cursor selects a node; its blocks are highlighted in the pool (Enter
shows the pool). With a host tier, the blocks held there hang under their parent block in the tier's colour
(kvtui/state/tier_tree.py), one row per unbranched run: what a prefix match can still load back.
Textual's Tree widget rebuilds every line on change; this view only builds the visible rows.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.message import Message
from textual.strip import Strip

from kvtui.state import CacheState
from kvtui.state.tier_tree import TierRun, run_tokens, tree_rows
from kvtui.widgets.base import LineView, fit_segments, fmt_seconds, join_texts, pad, plural, show_text
from kvtui.widgets.palette import Palette

# how long (in events) a node keeps its insert / hit / split mark
RECENT_EVENTS = 64
# a node's recent mark -> its colour role (kvtui/widgets/palette.py)
MARK_ROLE = {"insert": "insert-mark", "hit": "hit-mark", "split": "split-mark", "evict": "evict-mark"}
MAX_INDENT = 24


class RadixTreeView(LineView):
    BINDINGS = [
        Binding("up", "move(-1)", "node up", show=False, id="tree.up"),
        Binding("down", "move(1)", "node down", show=False, id="tree.down"),
        Binding("pageup", "move(-10)", "page up", show=False, id="tree.pageup"),
        Binding("pagedown", "move(10)", "page down", show=False, id="tree.pagedown"),
        Binding("enter", "show_in_pool", "node's blocks in the pool", show=False, id="tree.show_in_pool"),
    ]

    class NodeSelected(Message):
        def __init__(self, node_id: int | None, show_pool: bool = False):
            super().__init__()
            self.node_id = node_id
            self.show_pool = show_pool

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cursor = 0
        self._rows: list[tuple[int, int | TierRun]] = []
        self._rows_key: tuple | None = None

    def rows(self) -> list[tuple[int, int | TierRun]]:
        state = self.view.state
        if state is None:
            return []
        key = (id(state), state.index)
        if key != self._rows_key:
            self._rows, self._rows_key = tree_rows(state), key
        return self._rows

    def row_count(self, width: int) -> int:
        state = self.view.state
        if state is None:
            return 1
        extra = 1 + len(state.evicted_nodes) if state.evicted_nodes else 0
        return 1 + max(1, len(self.rows())) + extra

    def render_row(self, row: int, width: int) -> Strip:
        state = self.view.state
        palette = self.palette()
        dim = palette["dim"]
        if state is None:
            return pad([Segment("no trace yet", dim)], width)
        rows = self.rows()
        if row == 0:
            return fit_segments(self._header(state, rows), width)
        row -= 1
        if row < len(rows):
            return self._node_row(state, row, width)
        if not rows and row == 0:
            return pad([Segment("  (empty: nothing cached yet)", dim)], width)
        row -= max(1, len(rows))
        if row == 0:
            return pad([Segment("recently evicted (newest last):", palette["heading"])], width)
        node_id, t, text = state.evicted_nodes[row - 1]
        return pad(
            [
                Segment(f"  ✗ n{node_id} ", palette["evicted"]),
                Segment(show_text(text), dim),
                Segment(f"  at {t:.2f}s", dim),
            ],
            width,
        )

    def _node_row(self, state: CacheState, index: int, width: int) -> Strip:
        depth, node_id = self._rows[index]
        palette = self.palette()
        dim = palette["dim"]
        indent = "│ " * min(depth, MAX_INDENT // 2)
        if depth > MAX_INDENT // 2:
            indent = f"…{depth:>3}" + indent[4:]
        if isinstance(node_id, TierRun):
            return self._run_row(state, node_id, indent, index, width)
        node = state.nodes[node_id]
        recent = state.seq - node.mark_seq <= RECENT_EVENTS and node.mark in MARK_ROLE
        segs = [Segment(indent, dim), Segment("├ ", dim)]
        if recent:
            segs.append(Segment(f"{node.mark}", palette[MARK_ROLE[node.mark]]))
            segs.append(Segment(" "))
        right = (
            f"  n{node_id} {block_run(node.blocks)} hits {node.hits} lock {len(node.lockers)}"
            f" {fmt_seconds(max(0.0, state.t - node.last_access))} ago"
        )
        used = sum(s.cell_length for s in segs)
        room = max(8, width - used - len(right))
        style = palette["bold"] if node.lockers else Style()
        if index == self.cursor:
            style = style + (palette["cursor"] if self.has_focus else Style(underline=True))
        segs += _fit(_node_text(state, node, style, palette), room)
        segs.append(Segment(right, dim))
        return pad(segs, width)

    def _run_row(self, state: CacheState, run: TierRun, indent: str, index: int, width: int) -> Strip:
        """Blocks held in a lower tier: the tier's name and colour, their tokens, slots and positions."""
        palette = self.palette()
        dim = palette["dim"]
        role = run.tier if run.tier in ("host", "disk") else "host"
        first = state.tier_slots[run.tier][run.slots[0]]
        segs = [Segment(indent, dim), Segment("└ ", dim), Segment(f"{run.tier} ", palette[role])]
        right = (
            f"  {run.tier[0]}{','.join(map(str, run.slots[:3]))}{'…' if len(run.slots) > 3 else ''}"
            f" L{first.logical}{f'-{first.logical + len(run.slots) - 1}' if len(run.slots) > 1 else ''}"
            f" in {run.tier} {fmt_seconds(max(0.0, state.t - first.arrived))}"
        )
        used = sum(s.cell_length for s in segs)
        room = max(8, width - used - len(right))
        style = palette[role]
        if index == self.cursor:
            style = style + (palette["cursor"] if self.has_focus else Style(underline=True))
        _, texts = run_tokens(state, run)
        segs += _fit([Segment(show_text(join_texts(texts)), style)], room)
        segs.append(Segment(right, dim))
        return pad(segs, width)

    def _header(self, state: CacheState, rows: list) -> list[Segment]:
        locked = sum(1 for n in state.nodes.values() if n.lockers)
        palette = self.palette()
        nodes = sum(1 for _, item in rows if not isinstance(item, TierRun))
        held = sum(len(slots) for slots in state.tier_slots.values())
        segs = [
            Segment(
                f"root · {plural(nodes, 'node')} · {locked} locked · {plural(state.evictions, 'block')} evicted",
                palette["heading"],
            )
        ]
        if held:
            tiers = " + ".join(name for name, slots in state.tier_slots.items() if slots)
            segs.append(
                Segment(f" · {plural(held, 'block')} in {tiers} hang under their parents", palette["host"])
            )
        run = self.selected_run()
        if run is not None:
            segs.append(
                Segment(
                    f" · {run.tier}: {len(run_tokens(state, run)[0])} tok in {plural(len(run.slots), 'block')}, "
                    "loaded back when a prompt's match reaches them",
                    palette["dim"],
                )
            )
        node = self.selected(state)
        if node is not None:
            segs.append(
                Segment(
                    f" · n{node.node_id}: {len(node.token_ids)} tok in {len(node.blocks)} block{'s' * (len(node.blocks) != 1)}"
                    + (f", locked by {', '.join(dict.fromkeys(node.lockers))}" if node.lockers else "")
                    + " (Enter: see in pool)",
                    palette["dim"],
                )
            )
        if any(_sibling_before(state, node_id) for _, node_id in rows):
            # the notation of a node that parts from its earlier sibling, said where it is seen (last: the
            # selected node's line matters more on a narrow screen)
            segs.append(Segment(" · …N=: the first N tokens equal its first sibling's", palette["dim"]))
        return segs

    def selected(self, state: CacheState | None = None):
        state = state or self.view.state
        rows = self.rows()
        if state is None or not rows:
            return None
        item = rows[min(self.cursor, len(rows) - 1)][1]
        return None if isinstance(item, TierRun) else state.nodes.get(item)

    def selected_run(self) -> TierRun | None:
        """The lower-tier run under the cursor, if the cursor is on one."""
        rows = self.rows()
        item = rows[min(self.cursor, len(rows) - 1)][1] if rows else None
        return item if isinstance(item, TierRun) else None

    def action_move(self, delta: int) -> None:
        self.cursor = max(0, min(len(self.rows()) - 1, self.cursor + delta))
        self.scroll_to_row(self.cursor + 1)
        self.refresh()
        node = self.selected()
        self.post_message(self.NodeSelected(node.node_id if node else None))

    def action_show_in_pool(self) -> None:
        node = self.selected()
        self.post_message(self.NodeSelected(node.node_id if node else None, show_pool=True))

    def on_click(self, event) -> None:
        row = event.y + int(self.scroll_offset.y) - 1
        if 0 <= row < len(self.rows()):
            self.cursor = row
            self.action_move(0)


def block_run(blocks: list[int]) -> str:
    """P3 · P3-6 (a contiguous run) · P3,9,10… (at most three listed)."""
    if not blocks:
        return "-"
    if len(blocks) > 1 and blocks == list(range(blocks[0], blocks[0] + len(blocks))):
        return f"P{blocks[0]}-{blocks[-1]}"
    return "P" + ",".join(map(str, blocks[:3])) + ("…" if len(blocks) > 3 else "")


def _sibling_before(state: CacheState, node_id: int) -> bool:
    """The node has an earlier sibling: its row may start with `…N=`."""
    if isinstance(node_id, TierRun):
        return False
    node = state.nodes.get(node_id)
    parent = state.nodes.get(node.parent_id) if node is not None else None
    return parent is not None and bool(parent.children) and parent.children[0] != node_id


def _node_text(state: CacheState, node, style: Style, palette: Palette) -> list[Segment]:
    """The node's tokens; after an earlier sibling, the equal lead collapsed and the first difference marked."""
    parent = state.nodes.get(node.parent_id)
    same = 0
    if parent is not None and parent.children and parent.children[0] != node.node_id:
        sibling = state.nodes.get(parent.children[0])
        if sibling is not None:
            for a, b in zip(sibling.token_ids, node.token_ids):
                if a != b:
                    break
                same += 1
    if not same:
        return [Segment(show_text(join_texts(node.texts)), style)]
    texts = node.texts
    segs = [Segment(f"…{same}=", palette["dim"])]
    if same < len(texts):
        # the first token that differs from the earlier sibling: the `dropped` role (where reuse stops)
        segs.append(Segment(show_text(texts[same]).replace(" ", "␣") or "∅", palette["dropped"]))
    segs.append(Segment(show_text(join_texts(texts[same + 1 :])), style))
    return segs


def _fit(segs: list[Segment], room: int) -> list[Segment]:
    """Crop or pad segments to exactly `room` cells, with an ellipsis when cropped."""
    out, used = [], 0
    for seg in segs:
        if used + seg.cell_length > room:
            keep = max(0, room - used - 1)
            out.append(Segment(seg.text[:keep] + "…", seg.style))
            return out
        out.append(seg)
        used += seg.cell_length
    out.append(Segment(" " * (room - used)))
    return out
