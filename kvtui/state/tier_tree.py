"""The prefix tree with the blocks of the lower tiers hung in it: what a prefix match can still reach.

A block in host (or disk) names its parent by hash. It hangs under the device node holding that parent block,
under the lower-tier block holding it, or under the root (block 0 chains on a root key). A chain of lower-tier
blocks of one tier with no branch is one row, a `TierRun`, as a radix node is one row for a run of device blocks.
Rows are (depth, node_id) for device nodes and (depth, TierRun) for runs, depth-first.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtui.state.cache_state import CacheState


@dataclass(frozen=True)
class TierRun:
    """Lower-tier blocks chained one after another in one tier (a row of the tree)."""

    tier: str
    slots: tuple[int, ...]
    # the hash its first block chains on
    parent_hash: str


def tree_rows(state: CacheState) -> list[tuple[int, int | TierRun]]:
    """The radix tree flattened depth-first, each device node followed by the lower-tier runs under its blocks."""
    if not any(state.tier_slots.values()):
        return list(state.radix_rows())
    children = state.tier_children()
    # hash -> the device node holding the block
    on_device = {
        state.block_hash[p]: node_id
        for node_id, node in state.nodes.items()
        for p in node.blocks
        if 0 <= p < state.num_blocks and state.block_hash[p]
    }
    below_node: dict[int, list[TierRun]] = {}
    for key, found in children.items():
        if key in state.tier_of:
            continue
        # a device block's hash, or a root key (block 0)
        node_id = on_device.get(key, 0)
        below_node.setdefault(node_id, []).extend(_runs(state, children, key, found))
    rows: list[tuple[int, int | TierRun]] = []

    def add_runs(depth: int, runs: list[TierRun]) -> None:
        for run in runs:
            rows.append((depth, run))
            last = state.tier_slots[run.tier][run.slots[-1]].hash
            add_runs(depth + 1, _runs(state, children, last, children.get(last, [])))

    stack: list[tuple[int, int | None, list[TierRun] | None]] = [(0, None, below_node.get(0, []))]
    stack += [(0, child, None) for child in reversed(state.nodes[0].children)]
    while stack:
        depth, node_id, runs = stack.pop()
        if runs is not None:
            add_runs(depth, runs)
            continue
        node = state.nodes.get(node_id)
        if node is None:
            continue
        rows.append((depth, node_id))
        # after the node's device children: its runs (pushed first, popped last)
        stack.append((depth + 1, None, below_node.get(node_id, [])))
        stack.extend((depth + 1, child, None) for child in reversed(node.children))
    return rows


def _runs(state: CacheState, children, parent_hash: str, found: list[tuple[str, int]]) -> list[TierRun]:
    """The runs starting at the lower-tier blocks `found` under `parent_hash`: each follows its chain while the
    block has exactly one child, in the same tier."""
    runs = []
    for tier, slot in found:
        slots = [slot]
        while True:
            nxt = children.get(state.tier_slots[tier][slots[-1]].hash, [])
            if len(nxt) != 1 or nxt[0][0] != tier:
                break
            slots.append(nxt[0][1])
        runs.append(TierRun(tier, tuple(slots), parent_hash))
    return runs


def run_tokens(state: CacheState, run: TierRun) -> tuple[list[int], list[str]]:
    """The token ids and texts of a run's blocks, in order."""
    ids: list[int] = []
    texts: list[str] = []
    for slot in run.slots:
        held = state.tier_slots[run.tier][slot]
        ids += held.token_ids
        texts += held.texts
    return ids, texts
