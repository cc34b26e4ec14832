"""The radix tree reducer (kvtui/state/tree.py): insert, split, hit, evict and lock refs."""

from __future__ import annotations

from kvtui.state import replay
from tests.kvtui.state.reducer_events import HEADER, Events, arrive


def test_radix_insert_split_hit_evict():
    e = Events()
    arrive(e, "a", list(range(8)))
    e(
        "radix_insert",
        node_id=1,
        parent_id=0,
        blocks=[0, 1],
        token_ids=list(range(8)),
        texts=[str(i) for i in range(8)],
        request_id="a",
        hashes=["h0", "h1"],
    )
    e("radix_lock", node_id=1, request_id="a", lock_ref=1)
    e("radix_split", node_id=1, new_node_id=2, at=1)
    e("radix_hit", node_id=1, request_id="b", blocks=1)
    e("radix_lock", node_id=1, request_id="b", lock_ref=2)
    s = replay(HEADER, e.out)
    assert s.nodes[0].children == [1] and s.nodes[1].children == [2]
    assert s.nodes[1].blocks == [0] and s.nodes[2].blocks == [1] and s.nodes[2].token_ids == [4, 5, 6, 7]
    assert s.block_hash[:2] == ["h0", "h1"]
    # lock refs as the engine counts them: a's handle moved to the suffix (2) at the split; b locks the prefix
    assert s.nodes[1].hits == 1 and sorted(s.nodes[1].lockers) == ["a", "b"] and s.nodes[2].lockers == ["a"]
    assert s.requests["a"].locked == [2]
    assert s.radix_rows() == [(0, 1), (1, 2)]
    e("radix_unlock", node_id=2, request_id="a", lock_ref=0)
    e("radix_unlock", node_id=1, request_id="b", lock_ref=0)
    e("radix_evict", node_id=2)
    s = replay(HEADER, e.out)
    assert s.nodes[1].lockers == [] and 2 not in s.nodes and s.radix_rows() == [(0, 1)]
