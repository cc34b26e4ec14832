"""engine/core/group_blocks.py without a model: window_layout="paged" on a two-layer hybrid shape (layer 0 a
window of 8, layer 1 full attention, blocks of 4), the hit rule case by case with exact block ids. The window
group keeps every block cached (retention_interval=None) unless a test says otherwise: vLLM's default
(0) is tests/engine/core/test_group_retention.py's."""

from __future__ import annotations

from engine.core.request import Request, SamplingParams, Status
from engine.models.shape import ModelShape
from engine.trace import TraceSink
from tests.helpers.model_free import model_free_manager

BS = 4
# vLLM's groups: the window group first (layer 0 comes first), the full group second (the table group)
HYBRID = ModelShape("hybrid", 2, 1, 1, 1, "float32", 4, windows=(8, None))
WINDOW, FULL = 0, 1


def manager(num_blocks: int = 64, retention_interval: int | None = None):
    events: list[dict] = []
    trace = TraceSink(clock=lambda: 0.0)
    trace.listeners.append(events.append)
    cache = model_free_manager(
        num_blocks,
        BS,
        trace,
        shape=HYBRID,
        window_layout="paged",
        retention_interval=retention_interval,
    )
    return cache, events


def request(rid: str, tokens) -> Request:
    return Request(rid, list(tokens), SamplingParams(max_tokens=1), 0.0)


def run(cache, req: Request, step: int = 64) -> None:
    """Admission, then the prompt in chunks of `step`, each chunk's full blocks cached, then finish."""
    cache.admit(req)
    req.status = Status.RUNNING
    while req.num_computed < req.num_tokens:
        n = min(step, req.num_tokens - req.num_computed)
        cache.allocate_slots(req, n)
        req.num_computed += n
        cache.cache_blocks(req)


def test_groups_share_the_pool_and_every_block_event_names_its_group():
    cache, events = manager()
    a = request("a", range(10))
    run(cache, a)
    # a block position takes a block in each group, from the one free list, group by group in group order
    assert cache.groups.tables["a"][WINDOW] == [0, 1, 2] and a.block_table == [3, 4, 5]
    assert cache.blocks_to_append(a, 4) == 2
    assert {e["group"] for e in events if e["type"] == "block_allocated"} == {WINDOW, FULL}
    assert all("group" in e for e in events if e["type"].startswith("block_"))


def test_window_blocks_leave_while_the_request_runs_and_stay_cached():
    cache, events = manager()
    a = request("a", range(30))
    # chunks of 4: before each chunk the window group gives back what the next token's window left
    run(cache, a, step=4)
    # computed 28 before the last chunk: positions below 28 - 8 + 1 = 21 are out, blocks 0..4
    assert cache.groups.tables["a"][WINDOW] == [None] * 5 + [10, 12, 14]
    released = [e["physical"] for e in events if e["type"] == "block_released" and e["group"] == WINDOW]
    cached = [e["physical"] for e in events if e["type"] == "block_cached" and e["group"] == WINDOW]
    assert released == cached == [0, 2, 4, 6, 8]
    assert cache.num_cached() == 5 and cache.groups.num_evictable() == 5
    cache.free(a)
    # the full group keeps its 7 whole blocks in the tree, the window group its 7 whole blocks by hash
    assert cache.num_cached() == 14


def test_a_full_hit_shares_every_full_block_and_only_the_window_before_the_hit_point():
    cache, _ = manager()
    a = request("a", range(25))
    run(cache, a)
    full = a.block_table[:6]
    cache.free(a)
    b = request("b", range(25))
    cache.admit(b)
    # 6 whole blocks before the last token; the window group needs ceil(7 / 4) = 2 blocks before position 24
    assert b.num_computed == 24 and b.block_table == full
    assert cache.groups.tables["b"][WINDOW] == [None] * 4 + window_blocks(cache)[4:6]


def window_blocks(cache) -> list[int]:
    keys = Request("k", list(range(25)), SamplingParams(), 0.0)
    cache.prefix_cache.hashes(keys, keys.tokens, 6)
    return [cache.groups.by_hash[WINDOW][key] for key in keys.block_keys]


def test_a_hit_limited_by_the_window_group_names_the_window():
    cache, events = manager()
    a = request("a", range(25))
    run(cache, a)
    full = a.block_table[:4]
    cache.free(a)
    blocks = window_blocks(cache)
    # the window group's block 4 is evicted: its rightmost run of two ends at block 4 (blocks 2, 3)
    cache.groups.evictable.move_to_end(blocks[4], last=False)
    assert cache.evict(1) == [blocks[4]]
    b = request("b", range(25))
    cache.admit(b)
    assert b.num_computed == 16 and b.block_table == full
    assert cache.groups.tables["b"][WINDOW] == [None, None, blocks[2], blocks[3]]
    match = [e for e in events if e["type"] == "prefix_match"][-1]
    assert match["reason"] == "window" and match["detail"]["window_backoff"]
    # the group that lowered the hit, as vLLM's coordinator would find it
    assert match["detail"]["limiting_group"] == WINDOW and match["detail"]["matched_blocks"] == 6


def test_a_request_whose_window_blocks_left_and_were_evicted_still_hits_past_them():
    # 18 blocks for a (9 per group), 7 free once it finished
    cache, events = manager(num_blocks=23)
    a = request("a", range(33))
    run(cache, a, step=4)
    # while a ran, its window blocks 0..4 left the window into the cache
    cache.free(a)
    evicted_first = [e["physical"] for e in events if e["type"] == "block_cached" and e["group"] == WINDOW][
        :5
    ]
    # another request takes 12 blocks: the 7 free ones, then the 5 oldest cached (those that left first)
    c = request("c", range(100, 124))
    run(cache, c)
    evicted = [e["physical"] for e in events if e["type"] == "block_evicted"]
    assert evicted == evicted_first
    cache.free(c)
    b = request("b", range(33))
    cache.admit(b)
    # the full group still holds all 8 blocks; the window group needs only blocks 6 and 7
    assert b.num_computed == 32
    assert cache.groups.tables["b"][WINDOW][:6] == [None] * 6


def test_an_all_window_model_gets_a_table_group_without_layers():
    shape = ModelShape("all-window", 2, 1, 1, 1, "float32", 4, windows=(8, 8))
    cache = model_free_manager(64, BS, shape=shape, window_layout="paged")
    assert [g.kind for g in cache.groups.groups] == ["sliding_window", "index"]
    assert cache.groups.header_fields()["table_group"] == 1
    assert [g["kind"] for g in cache.groups.header_fields()["kv_groups"]] == ["sliding_window", "index"]


def test_admission_asks_for_a_block_in_every_group():
    cache, _ = manager(num_blocks=3)
    a = request("a", range(4))
    run(cache, a)
    # one block left: a new request's first block position needs two (one per group)
    assert cache.pool.num_free() == 1
    assert not cache.can_admit(request("b", range(50, 54)), budget=8)


def test_the_scheduler_runs_a_paged_workload_under_pressure_with_no_model():
    """Long requests in a small pool: preemption and eviction across the groups, every block back at the end."""
    from engine.core.scheduler import Scheduler
    from tests.helpers.model_free import run_model_free

    cache, events = manager(num_blocks=20)
    scheduler = Scheduler(cache, cache.trace, max_batched_tokens=8, max_num_seqs=4)
    system = list(range(16))
    requests = {
        f"r{i}": Request(f"r{i}", [*system, 40 + i, 50 + i], SamplingParams(max_tokens=14), 0.0)
        for i in range(4)
    }
    for req in requests.values():
        scheduler.add(req)
    assert sorted(run_model_free(cache, scheduler, requests)) == sorted(requests)
    assert any(e["type"] == "request_preempted" for e in events), "the test must exercise preemption"
    assert any(e["type"] == "block_evicted" for e in events), "the test must exercise eviction"
    assert not any(cache.pool.ref_counts) and not cache.groups.tables
    assert cache.pool.num_free() + cache.num_cached() == 20


def test_no_row_is_quiet_in_the_paged_layout():
    """A decode's allocate_slots gives back what left the window: a paged core takes no row in bulk."""
    from engine.config import EngineConfig
    from engine.core.engine_core import EngineCore
    from engine.core.quiet_rows import scan

    def decoding(layout: str):
        config = EngineConfig(block_size=4, num_blocks=32, window_layout=layout)
        core = EngineCore(HYBRID, config, TraceSink(clock=lambda: 0.0), step_events=False)
        core.add_request([1], SamplingParams(max_tokens=6, ignore_eos=True), request_id="q")
        scheduled = core.schedule()
        core.update_from_output(scheduled, lambda index, req: 5)
        return scan(core, {})

    assert [r.request_id for r in decoding("ring").quiet] == ["q"]
    assert decoding("paged").quiet == [] and decoding("paged").run == 0
