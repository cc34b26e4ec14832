"""The radix tree reducer (kvtui/state/tree.py): insert, split, hit, evict and lock refs."""

from __future__ import annotations

from reducer_events import HEADER, Events, arrive

from kvtui.state import replay


def test_radix_insert_split_hit_evict():
    e = Events()
    arrive(e, "a", list(range(8)))
    e("radix_insert", node_id=1, parent_id=0, blocks=[0, 1], token_ids=list(range(8)),
      texts=[str(i) for i in range(8)], request_id="a")
    e("radix_split", node_id=1, new_node_id=2, at=1)
    e("radix_hit", node_id=1, request_id="a", blocks=1)
    s = replay(HEADER, e.out)
    assert s.nodes[0].children == [1] and s.nodes[1].children == [2]
    assert s.nodes[1].blocks == [0] and s.nodes[2].blocks == [1] and s.nodes[2].token_ids == [4, 5, 6, 7]
    assert s.nodes[1].hits == 1 and s.nodes[1].lockers == ["a"]
    assert s.radix_rows() == [(0, 1), (1, 2)]
    e("request_finished", request_id="a", reason="length", num_prompt_tokens=8, num_output_tokens=0,
      cached_tokens=0, ttft=None, tpot=None)
    e("radix_evict", node_id=2)
    s = replay(HEADER, e.out)
    assert s.nodes[1].lockers == [] and 2 not in s.nodes and s.radix_rows() == [(0, 1)]
