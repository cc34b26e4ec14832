"""engine/core/radix.py: every eviction policy (lru, lfu, cost), an injected clock, and the events it writes."""

from __future__ import annotations

import pytest

from engine.core.eviction import POLICIES, recompute_cost
from engine.core.radix import RadixCache
from engine.trace import TraceSink, validate_event
from tests.engine.core.radix_rig import BS, Rig, seq
from tests.helpers.model_free import model_free_manager


# --- policies -------------------------------------------------------------------------------------------
def _three_leaves(policy: str) -> Rig:
    """Three cached leaves under a shared root block: x (2 deep, old), y (3 deep, hit twice), z (2 deep, new)."""
    rig = Rig(num_blocks=32, policy=policy)
    rig.run("x", seq(1, 2, extra=(0,)))
    rig.run("y", seq(1, 3, 3, extra=(0,)))
    rig.run("y2", seq(1, 3, 3, extra=(0,)))
    rig.run("y3", seq(1, 3, 3, extra=(0,)))
    rig.run("z", seq(1, 4, extra=(0,)))
    return rig


def _first_victim_token(rig: Rig) -> int:
    physical = rig.cache.evict(1)[0]
    event = rig.of_type("block_evicted")[-1]
    assert event["physical"] == physical and event["policy"] == rig.cache.policy
    return next(e for e in rig.of_type("radix_insert") if physical in e["blocks"])["token_ids"][-1]


def test_lru_evicts_the_least_recently_used_leaf():
    assert _first_victim_token(_three_leaves("lru")) == 2


def test_lfu_evicts_the_least_hit_leaf_with_lru_ties():
    rig = _three_leaves("lfu")
    # x and z: 0 hits; x is older
    assert _first_victim_token(rig) == 2
    # then z; y (hit twice) stays
    assert _first_victim_token(rig) == 4
    assert rig.cache.match(seq(1, 3, 3, extra=(0,))).reason == "full_match"


def test_cost_evicts_the_cheapest_block_to_recompute():
    rig = _three_leaves("cost")
    # y's tail is block 2 (deep, hit twice): most expensive. x and z tails are block 1: x is older.
    assert _first_victim_token(rig) == 2
    assert _first_victim_token(rig) == 4
    assert recompute_cost(2, 4) > recompute_cost(1, 4) > recompute_cost(0, 4) == 10


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="lru, lfu, cost"):
        Rig(policy="random")
    assert POLICIES == ("lru", "lfu", "cost")


def test_an_injected_clock_orders_lru():
    now = [0.0]
    trace = TraceSink(clock=lambda: 0.0)
    manager = model_free_manager(8, BS, trace)
    cache = manager.prefix_cache.radix = RadixCache(manager.pool, trace, clock=lambda: now[0])
    # inserted second but "older"
    for value, t in ((1, 5.0), (2, 1.0)):
        now[0] = t
        table = [manager.allocate_block("r", 0), manager.allocate_block("r", 1)]
        cache.insert(seq(value, extra=(0,)), table)
        manager.release_table(table, "r")
    victim = cache.evict(1)[0]
    assert cache.match(seq(2, extra=(0,))).reason == "evicted" and not cache.holds(victim)


# --- the trace --------------------------------------------------------------------------------------------
def test_every_event_matches_the_schema():
    rig = _three_leaves("lru")
    rig.admit("w", seq(1, 3, 9, extra=(0,)))
    rig.cache.evict(100)
    rig.finish("w")
    rig.cache.evict(100)
    assert {
        "radix_insert",
        "radix_split",
        "radix_hit",
        "radix_evict",
        "block_cached",
        "block_evicted",
    } <= set(rig.types())
    for event in rig.events:
        assert validate_event(event) is None, event
