"""The pool reducer (kvtui/state/pool.py): block states, owners, block tables, blocks being written."""

from __future__ import annotations

from kvtui.state import CACHED, FREE, SHARED, USED, WRITING, CacheState, replay
from tests.kvtui.state.reducer_events import HEADER, Events, arrive


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
