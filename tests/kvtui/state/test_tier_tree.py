"""The prefix tree with lower-tier blocks hung in it (kvtui/state/tier_tree.py): under the device node that
holds the parent block, under a lower-tier parent, or under the root; unbranched chains as one run."""

from __future__ import annotations

from engine.trace import read_trace
from kvtui.state import replay
from kvtui.state.tier_tree import TierRun, run_tokens, tree_rows
from tests.kvtui.state.reducer_events import HEADER, Events

TIERED = {**HEADER, "config": {"host_blocks": 8}}
FIXTURE = "fixtures/traces/host_tier.jsonl"


def offload(e: Events, key: str, parent: str, slot: int, tier="host", tokens=(5, 6, 7, 8)):
    e(
        "block_offloaded",
        hash=key,
        parent_hash=parent,
        src_tier="device",
        src=0,
        tier=tier,
        slot=slot,
        logical=0,
        token_ids=list(tokens),
        texts=[f"t{t}" for t in tokens],
    )


def device_node(e: Events, node_id: int, parent_id: int, blocks: list[int], hashes: list[str]) -> None:
    e(
        "radix_insert",
        node_id=node_id,
        parent_id=parent_id,
        blocks=blocks,
        token_ids=list(range(4 * len(blocks))),
        texts=[str(i) for i in range(4 * len(blocks))],
        request_id=None,
        hashes=hashes,
    )


def test_without_lower_blocks_the_rows_are_the_radix_rows():
    e = Events()
    device_node(e, 1, 0, [0, 1], ["a", "b"])
    state = replay(TIERED, e.out)
    assert tree_rows(state) == state.radix_rows() == [(0, 1)]


def test_chains_branches_and_where_they_hang():
    e = Events()
    device_node(e, 1, 0, [0, 1], ["a", "b"])
    device_node(e, 2, 1, [2], ["c"])
    # under the node's middle block, then a chain of two with a branch after it
    offload(e, "x1", "a", 0)
    offload(e, "x2", "x1", 1)
    offload(e, "y", "x2", 2)
    offload(e, "z", "x2", 3)
    # under node 2's block, and one chained on a root key
    offload(e, "w", "c", 4)
    offload(e, "r", "root:salt", 5)
    state = replay(TIERED, e.out)
    rows = tree_rows(state)
    shown = [(depth, item if isinstance(item, int) else item.slots) for depth, item in rows]
    assert shown == [(0, 1), (1, 2), (2, (4,)), (1, (0, 1)), (2, (2,)), (2, (3,)), (0, (5,))]
    run = rows[3][1]
    assert run == TierRun("host", (0, 1), "a")
    assert run_tokens(state, run) == ([5, 6, 7, 8] * 2, ["t5", "t6", "t7", "t8"] * 2)
    # every held block once
    held = [slot for _, item in rows if isinstance(item, TierRun) for slot in item.slots]
    assert sorted(held) == sorted(state.tier_slots["host"])


def test_a_chain_stops_where_the_tier_changes():
    e = Events()
    offload(e, "x1", "root", 0)
    offload(e, "x2", "x1", 0, tier="disk")
    state = replay({**HEADER, "config": {"host_blocks": 2, "disk_blocks": 2}}, e.out)
    assert [(d, item.tier, item.slots) for d, item in tree_rows(state)] == [
        (0, "host", (0,)),
        (1, "disk", (0,)),
    ]


def test_the_recorded_host_tier_hangs_every_block_under_its_parent():
    trace = read_trace(FIXTURE, strict=True)
    # every point of the trace where host holds blocks
    for cut in range(0, len(trace.events), 7):
        state = replay(trace.header, trace.events[:cut])
        rows = tree_rows(state)
        held = [(item.tier, slot) for _, item in rows if isinstance(item, TierRun) for slot in item.slots]
        assert sorted(held) == sorted(("host", slot) for slot in state.tier_slots["host"])
        for i, (depth, item) in enumerate(rows):
            if not isinstance(item, TierRun):
                continue
            # the row above it at depth - 1 holds its parent block (a device node or a run), or it is at the root
            above = next((rows[j][1] for j in range(i - 1, -1, -1) if rows[j][0] == depth - 1), None)
            if above is None:
                assert depth == 0 and item.parent_hash not in state.tier_of
            elif isinstance(above, TierRun):
                assert state.tier_slots[above.tier][above.slots[-1]].hash == item.parent_hash
            else:
                hashes = [state.block_hash[p] for p in state.nodes[above].blocks]
                assert item.parent_hash in hashes
