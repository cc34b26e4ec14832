"""vLLM's hybrid cache with no model: groups sharing one pool, window blocks freed while a request runs (cached
until evicted, and evicted first), hits by the hybrid rule, and what a window group keeps cached (every block,
or vLLM 0.32's default: the runs a later hit can resume at). Blocks of 4 tokens, a window of 8 (a hit needs the
2 blocks before its point in the window group)."""

from engine.models.kv_groups import FULL, SLIDING, KVGroup
from kvtui.whatif.hybrid_cache import HybridCache, HybridRequest

B = 4
GROUPS = [KVGroup(SLIDING, 8), KVGroup(FULL)]


def run(cache: HybridCache, rid: str, tokens: list[int], outputs: int = 1) -> HybridRequest:
    """Admit, compute `outputs` more tokens, finish; the request."""
    req = HybridRequest(rid, list(tokens))
    assert cache.admit(req, len(tokens))
    for k in range(outputs):
        req.tokens.append(1000 + k)
        assert cache.can_append(req, 1)
        cache.append(req, 1)
    cache.free(req)
    return req


def test_a_window_group_frees_the_blocks_that_left_its_window_while_the_request_runs():
    cache = HybridCache(GROUPS, 16, B, retention_interval=None)
    req = HybridRequest("a", list(range(24)))
    assert cache.admit(req, 24)
    # 6 blocks in each group
    assert cache.free_blocks == 15 - 12
    cache.append(req, 1)
    # tokens 0-15 left the window of token 24 (its window: 17-24): the window group's blocks 0-3 freed;
    # one more block in each group for token 24
    assert req.blocks[0][:4] == [0, 0, 0, 0]
    assert cache.free_blocks == 3 + 4 - 2
    # freed, and still cached: the full group and the window group both serve a later request
    again = HybridRequest("b", list(range(24)) + [99] * 4)
    assert cache.find_hit(again).tokens == 24


def test_a_full_hit():
    cache = HybridCache(GROUPS, 64, B, retention_interval=None)
    run(cache, "a", list(range(24)))
    req = HybridRequest("b", list(range(24)) + [7, 7, 7, 7])
    assert cache.admit(req, 28)
    assert req.hit == 24 and req.limited_by is None


def test_window_blocks_freed_then_evicted_limit_a_later_hit():
    cache = HybridCache(GROUPS, 16, B, retention_interval=None)
    run(cache, "a", list(range(24)))
    # the window blocks freed while "a" ran wait at the free queue's head: an unrelated prompt evicts them
    run(cache, "c", [500 + i for i in range(12)], outputs=0)
    # "b" shares a's first 16 tokens: the full group holds them, the window group evicted them
    b = HybridRequest("b", list(range(16)) + [99] * 8)
    assert cache.admit(b, 24)
    assert b.hit == 0 and b.limited_by == 0
    assert b.found.per_group[1] == 16
    cache.free(b)


def test_a_hit_longer_than_the_window_survives_the_eviction_of_its_early_window_blocks():
    cache = HybridCache(GROUPS, 16, B, retention_interval=None)
    run(cache, "a", list(range(24)))
    run(cache, "c", [500 + i for i in range(12)], outputs=0)
    # a's window blocks 4-5 (tokens 16-23) are still cached: a hit at 24 needs only them
    d = HybridRequest("d", list(range(24)) + [99] * 4)
    assert cache.admit(d, 28)
    assert d.hit == 24


def test_the_match_unit_limits_a_hit():
    cache = HybridCache(GROUPS, 64, B, prefix_match_unit=16, retention_interval=None)
    run(cache, "a", list(range(24)))
    req = HybridRequest("b", list(range(24)) + [7] * 4)
    assert cache.admit(req, 28)
    assert req.hit == 16


def test_groups_share_the_pool_and_a_prompt_that_does_not_fit_waits():
    cache = HybridCache(GROUPS, 10, B, retention_interval=None)
    # 20 tokens: 5 blocks in each group, 10 of the 9 free
    assert not cache.admit(HybridRequest("big", list(range(20))), 20)
    assert cache.free_blocks == 9
    assert cache.admit(HybridRequest("fits", list(range(16))), 16)


def test_by_default_a_window_group_caches_only_the_run_before_the_prompts_last_token():
    cache = HybridCache(GROUPS, 64, B)
    run(cache, "a", list(range(24)))
    # the run before token 23, aligned to 20: the window group cached blocks 3 and 4 only
    assert sorted(
        i for i in range(6) if (0, cache._hashes(HybridRequest("x", list(range(24))))[i]) in cache.cached
    ) == [3, 4]
    # the same prompt again resumes there
    again = HybridRequest("again", list(range(24)))
    assert cache.admit(again, 24) and again.hit == 20
    cache.free(again)


def test_a_sibling_sharing_a_head_misses_in_the_window_group_and_leaves_a_junction_for_the_next():
    cache = HybridCache(GROUPS, 64, B)
    run(cache, "a", list(range(16)) + [100 + i for i in range(12)])
    # "b" shares a's first 16 tokens: the full group holds them, the window group kept only a's last run
    b = HybridRequest("b", list(range(16)) + [200 + i for i in range(12)])
    assert cache.admit(b, 28)
    assert b.hit == 0 and b.limited_by == 0 and b.junction == 16
    cache.free(b)
    # b cached the window group's run before the junction: "c" resumes at 16
    c = HybridRequest("c", list(range(16)) + [300 + i for i in range(12)])
    assert cache.admit(c, 28)
    assert c.hit == 16


def test_a_request_larger_than_the_pool_is_refused_and_the_queue_goes_on():
    from kvtui.whatif.hybrid_timeline import HybridTimeline
    from kvtui.whatif.requests import SimRequest

    requests = [
        SimRequest("huge", 0.0, list(range(40)), [1, 2]),
        SimRequest("small", 1.0, list(range(8)), [1, 2]),
    ]
    hits = HybridTimeline(GROUPS, 10, B, retention_interval=None).run(requests)
    assert hits["huge"] == (0, {"too_large": 40})
    assert "small" in hits


def test_a_mamba_style_group_keeps_a_state_only_at_a_unit_boundary():
    from engine.models.kv_groups import MAMBA

    groups = [KVGroup(MAMBA), KVGroup(FULL)]
    cache = HybridCache(groups, 64, B, prefix_match_unit=8)
    run(cache, "a", list(range(20)))
    # the state before a's last token (19, at the unit boundary 16) is kept: the same head resumes there
    again = HybridRequest("again", list(range(16)) + [500] * 8)
    assert cache.admit(again, 24) and again.hit == 16
    cache.free(again)
    # a sibling sharing 12 tokens: the full group holds 8 of them in units, the Mamba group no state at 8
    b = HybridRequest("b", list(range(12)) + [600] * 12)
    assert cache.admit(b, 24)
    assert b.hit == 0 and b.limited_by == 0 and b.junction == 8
    cache.free(b)
    # b kept the state at its junction: the next sibling resumes at 8
    c = HybridRequest("c", list(range(12)) + [700] * 12)
    assert cache.admit(c, 24) and c.hit == 8
