"""The reducer: events -> CacheState."""

from __future__ import annotations

from engine.trace import validate_event
from kvtui.state import CACHED, FREE, SHARED, USED, WRITING, CacheState, replay, state_fingerprint

HEADER = {"type": "header", "schema": 1, "model": {}, "block_size": 4, "num_blocks": 8, "bytes_per_block": 64,
          "bytes_per_token": 16, "config": {}}


class Events:
    """Builds valid events with increasing seq/t."""

    def __init__(self):
        self.out: list[dict] = []

    def __call__(self, etype: str, **fields) -> dict:
        ev = {"seq": len(self.out), "t": 0.01 * len(self.out), "type": etype, **fields}
        assert validate_event(ev) is None, validate_event(ev)
        self.out.append(ev)
        return ev


def arrive(e: Events, rid: str, ids: list[int]) -> None:
    e("request_arrived", request_id=rid, prompt_token_ids=ids, prompt_texts=[f"t{i}" for i in ids], max_tokens=4,
      cache_salt=None, parent_id=None)


def test_synthetic_events_are_valid(small_trace):
    header, events = small_trace
    assert all(validate_event(ev) is None for ev in events)
    assert [ev["seq"] for ev in events] == list(range(len(events)))


def test_allocate_share_release_free_and_cache():
    e = Events()
    arrive(e, "a", [1, 2, 3, 4, 5])
    e("block_allocated", physical=3, request_id="a", logical=0)
    e("block_allocated", physical=5, request_id="a", logical=1)
    s = replay(HEADER, e.out)
    assert s.tables == {"a": [3, 5]}
    assert (s.n_free, s.n_used, s.n_cached) == (6, 2, 0)
    assert s.block_state(3) == USED and s.block_state(0) == FREE
    assert s.block_tokens(3) == ([1, 2, 3, 4], ["t1", "t2", "t3", "t4"])
    arrive(e, "b", [1, 2, 3, 4, 9])
    e("block_shared", physical=3, request_id="b", logical=0, ref_count=2)
    s = replay(HEADER, e.out)
    assert s.block_state(3) == SHARED and s.ref[3] == 2
    assert sorted(s.owners[3]) == [("a", 0), ("b", 0)]
    e("block_released", physical=3, request_id="a", logical=0, ref_count=1)
    e("block_released", physical=5, request_id="a", logical=1, ref_count=0)
    e("block_freed", physical=5)
    e("block_released", physical=3, request_id="b", logical=0, ref_count=0)
    e("block_cached", physical=3, hash="abc")
    s = replay(HEADER, e.out)
    assert s.tables == {}
    assert s.block_state(3) == CACHED and s.block_hash[3] == "abc"
    assert (s.n_free, s.n_used, s.n_cached) == (7, 0, 1)
    e("block_evicted", physical=3, hash="abc", policy="lru", node_id=1)
    s = replay(HEADER, e.out)
    assert (s.n_free, s.n_cached, s.evictions) == (8, 0, 1)


def test_copy_on_write_replaces_src_in_writers_table():
    e = Events()
    arrive(e, "a", [1, 2])
    e("block_allocated", physical=0, request_id="a", logical=0)
    e("block_shared", physical=0, request_id="b", logical=0, ref_count=2)
    e("block_copied", src=0, dst=4, request_id="b", logical=0, num_tokens=2)
    s = replay(HEADER, e.out)
    assert s.tables == {"a": [0], "b": [4]}
    assert s.ref[0] == 1 and s.ref[4] == 1 and s.n_used == 2


def test_writing_marks_blocks_of_the_current_step():
    e = Events()
    arrive(e, "a", [1, 2, 3, 4, 5, 6])
    e("block_allocated", physical=2, request_id="a", logical=0)
    e("block_allocated", physical=6, request_id="a", logical=1)
    e("prefill_chunk", request_id="a", step=0, start=0, end=6)
    s = replay(HEADER, e.out)
    assert s.writing == {2, 6} and s.block_state(6) == WRITING
    e("step", step=0, num_tokens=6, num_prefill=1, num_decode=0, duration=0.1, free_blocks=6)
    e("decode", request_id="a", step=1, position=6)
    s = replay(HEADER, e.out)
    assert s.writing == {6}
    assert s.history_steps()[0][1:5] == (0, 2, 0, 6)


def test_tokens_ttft_and_edit_in_prompt_discards_generated():
    e = Events()
    arrive(e, "a", [1, 2, 3])
    e("token_emitted", request_id="a", position=3, token_id=7, text=" x")
    e("token_emitted", request_id="a", position=4, token_id=8, text=" y")
    s = replay(HEADER, e.out)
    req = s.requests["a"]
    assert req.token_ids == [1, 2, 3, 7, 8] and req.num_output == 2
    assert req.ttft == e.out[1]["t"] - e.out[0]["t"]
    assert s.itl_values() == [e.out[2]["t"] - e.out[1]["t"]]
    e("edit", request_id="a", position=1, kind="replace", token_ids=[9], texts=["t9"], num_deleted=1)
    s = replay(HEADER, e.out)
    req = s.requests["a"]
    assert req.token_ids == [1, 9, 3] and req.prompt_len == 3 and req.texts == ["t1", "t9", "t3"]
    e("edit", request_id="a", position=0, kind="insert", token_ids=[5], texts=["t5"], num_deleted=0)
    e("edit", request_id="a", position=3, kind="delete", token_ids=[], texts=[], num_deleted=1)
    s = replay(HEADER, e.out)
    assert s.requests["a"].token_ids == [5, 1, 9]


def test_edit_in_generated_part_keeps_prompt():
    e = Events()
    arrive(e, "a", [1, 2])
    for i, tok in enumerate([7, 8, 9]):
        e("token_emitted", request_id="a", position=2 + i, token_id=tok, text=f"g{tok}")
    e("edit", request_id="a", position=3, kind="replace", token_ids=[6], texts=["g6"], num_deleted=1)
    s = replay(HEADER, e.out)
    assert s.requests["a"].token_ids == [1, 2, 7, 6] and s.requests["a"].prompt_len == 2
    # the next emitted token continues after the edit
    e("token_emitted", request_id="a", position=4, token_id=5, text="g5")
    assert replay(HEADER, e.out).requests["a"].token_ids == [1, 2, 7, 6, 5]


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


def test_ring_slots_are_position_mod_window():
    e = Events()
    e("ring_write", request_id="a", group=0, window=4, start=0, end=6, evicted=[0, 1])
    s = replay(HEADER, e.out)
    ring = s.rings[("a", 0)]
    assert ring.slots == [4, 5, 2, 3] and ring.head == 2
    e("ring_write", request_id="a", group=0, window=4, start=6, end=7, evicted=[2])
    ring = replay(HEADER, e.out).rings[("a", 0)]
    assert ring.slots == [4, 5, 6, 3] and ring.head == 3 and ring.last_evicted == [2]


def test_pool_counts_stay_consistent(medium_trace):
    header, events = medium_trace
    s = CacheState(header)
    for ev in events:
        s.apply(ev)
        assert s.n_free + s.n_used + s.n_cached == s.num_blocks
        assert s.n_free >= 0 and s.n_cached >= 0 and s.n_used >= 0
    # every block in a table is held; held refs equal table owners
    for p in range(s.num_blocks):
        assert s.ref[p] == len(s.owners[p]) or s.block_state(p) in (FREE, CACHED)


def test_snapshot_is_isolated(small_trace):
    header, events = small_trace
    half = len(events) // 2
    s = replay(header, events[:half])
    before = state_fingerprint(s)
    snap = s.snapshot()
    s.apply_all(events[half:])
    assert state_fingerprint(snap) == before
    snap.apply_all(events[half:])
    assert state_fingerprint(snap) == state_fingerprint(s)
