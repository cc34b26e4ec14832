"""What a window group keeps cached in window_layout="paged" (engine/core/group_blocks.py with hybrid_hit.py's
`retained_blocks`), with no model: vLLM 0.32's default (retention_interval 0) keeps the run a later hit resumes
at, before the prompt's last token and before a shared-prefix junction; the rest are freed. The engine's hits on
a shared-prefix workload are the what-if twin's (kvtui/whatif/hybrid_cache.py) request by request. A layer of
a window of 8 and a full layer, blocks of 4: a hit needs the 2 window blocks before its point."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.core.request import SamplingParams
from engine.trace import TraceSink
from kvtui.whatif.hybrid_cache import HybridCache, HybridRequest
from tests.engine.core.test_group_blocks import BS, HYBRID, WINDOW, manager, request, run

# a system prompt of 37 tokens (9 whole blocks) before each request's own turn
SYSTEM = list(range(100, 137))


def shared_prefix_workload() -> list[list[int]]:
    """Three turns after one system prompt, one again, and a follow-up turn of the first."""
    first = [*SYSTEM, 1, 1, 1, 1, 1]
    return [
        first,
        [*SYSTEM, 2, 2, 2, 2, 2, 2, 2],
        [*SYSTEM, 3, 3, 3, 3, 3, 3],
        [*SYSTEM, 3, 3, 3, 3, 3, 3],
        [*first, 7, 7, 7],
        [*SYSTEM[:20], 4, 4, 4, 4],
        [*SYSTEM, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5],
    ]


def test_only_the_run_before_the_prompts_last_token_stays_cached():
    cache, events = manager(retention_interval=0)
    a = request("a", range(30))
    run(cache, a, step=4)
    cache.free(a)
    # position 29's hit needs blocks 5 and 6; blocks 0..4 left the window and went back free, block 7 is partial
    stored = [e["logical"] for e in events if e["type"] == "block_stored" and e["group"] == WINDOW]
    assert stored == [5, 6]
    freed = [e["physical"] for e in events if e["type"] == "block_freed" and e["group"] == WINDOW]
    assert len(freed) == 6 and cache.groups.num_evictable() == 2
    # the full group keeps every whole block in the tree
    assert cache.num_cached() == 7 + 2
    assert cache.pool.num_free() + cache.num_cached() == 64


def test_a_shared_prefix_is_served_from_the_second_request_that_shares_it():
    """The first turn keeps only its own end; the second finds the system prompt in the tree but not in the
    window group (a miss limited by it), and keeps the run before that junction; the third hits there."""
    cache, events = manager(retention_interval=0)
    done = []
    for i, tokens in enumerate(shared_prefix_workload()[:3]):
        req = request(f"r{i}", tokens)
        run(cache, req)
        cache.free(req)
        done.append(req)
    assert [req.num_cached for req in done] == [0, 0, 36]
    # the tree served the system prompt's 9 whole blocks to the second
    assert [req.junction for req in done] == [0, 36, 0]
    match = [e for e in events if e["type"] == "prefix_match"][1]
    assert match["detail"]["limiting_group"] == WINDOW and match["detail"]["matched_blocks"] == 9


def engine_hits(workload, retention: int | None, num_blocks: int = 256) -> list[int]:
    """Each prompt through the engine core alone (no model), one at a time: its cached tokens."""
    config = EngineConfig(
        block_size=BS, num_blocks=num_blocks, window_layout="paged", retention_interval=retention
    )
    core = EngineCore(HYBRID, config, TraceSink(clock=lambda: 0.0), step_events=False)
    hits = []
    for i, prompt in enumerate(workload):
        rid = core.add_request(prompt, SamplingParams(max_tokens=3, ignore_eos=True), request_id=f"r{i}")
        while core.has_unfinished():
            scheduled = core.schedule()
            core.update_from_output(scheduled, lambda index, req: 9)
        hits.append(core.requests[rid].num_cached)
    return hits


def twin_hits(groups, workload, retention: int | None, num_blocks: int = 256, outputs: int = 2) -> list[int]:
    """The same prompts through the what-if twin, each computing the `outputs` tokens the engine computes
    (max_tokens 3: the last one sampled is never computed)."""
    cache = HybridCache(list(groups), num_blocks, BS, retention_interval=retention)
    hits = []
    for i, prompt in enumerate(workload):
        req = HybridRequest(f"r{i}", list(prompt))
        assert cache.admit(req, len(prompt))
        for _ in range(outputs):
            req.tokens.append(9)
            cache.append(req, 1)
        cache.free(req)
        hits.append(req.hit)
    return hits


@pytest.mark.parametrize("retention", [0, None, 16])
def test_the_engine_hits_what_the_twin_hits(retention):
    workload = shared_prefix_workload()
    groups = manager()[0].groups.groups
    engine = engine_hits(workload, retention)
    assert engine == twin_hits(groups, workload, retention)
    if retention == 0:
        assert engine == [0, 0, 36, 40, 40, 0, 36]
    if retention is None:
        assert engine == [0, 36, 36, 40, 40, 20, 36]
