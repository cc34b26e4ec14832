"""kvtui/state/groups.py: the KV-cache groups of window_layout="paged" folded from a model-free manager's events:
the table group's blocks are the request's table, the other groups' go to their own tables, and a snapshot
keeps its own copy."""

from engine.core.request import Request, SamplingParams, Status
from engine.models.shape import ModelShape
from engine.trace import TraceSink
from kvtui.state.cache_state import CacheState
from tests.helpers.model_free import model_free_manager

HYBRID = ModelShape("hybrid", 2, 1, 1, 1, "float32", 4, windows=(8, None))


def test_group_tables_follow_the_events_and_a_snapshot_keeps_its_own():
    trace = TraceSink(clock=lambda: 0.0)
    cache = model_free_manager(64, 4, trace, shape=HYBRID, window_layout="paged")
    state = CacheState({"block_size": 4, "num_blocks": 64, **cache.groups.header_fields()})
    events = []
    trace.listeners.append(lambda e: (events.append(e), state.apply(dict(e))))
    req = Request("a", list(range(30)), SamplingParams(max_tokens=1), 0.0)
    cache.admit(req)
    req.status = Status.RUNNING
    for _ in range(6):
        cache.allocate_slots(req, 4)
        req.num_computed += 4
        cache.cache_blocks(req)
    before = state.snapshot()
    cache.allocate_slots(req, 4)
    req.num_computed += 4
    cache.cache_blocks(req)
    # the full group (1) is the table; the window group (0) released what left its window (-1)
    assert state.table_group == 1 and state.tables["a"] == req.block_table
    window = [-1 if b is None else b for b in cache.groups.tables["a"][0]]
    assert state.group_tables[0]["a"] == window and window[:2] == [-1, -1]
    # block_stored gave the window group's blocks their hashes
    stored = [e for e in events if e["type"] == "block_stored"]
    assert stored and all(state.block_hash[e["physical"]] == e["hash"] for e in stored)
    assert before.group_tables[0]["a"] != state.group_tables[0]["a"]
