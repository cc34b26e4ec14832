"""kvtui/whatif/curve.py: the one-pass LRU curve, by hand on small workloads and against plain simulations."""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from kvtui.whatif.curve import lru_curve, simulate_lru


def brute_force_lru(requests, capacity, matchable=None, weights=None, measure_from=0):
    """The model written out plainly: a block is its whole prefix (a tuple of keys); hits are the leading
    cached blocks; then the request's blocks are used tail first, so its head is the most recent."""
    cache: OrderedDict[tuple, None] = OrderedDict()
    hit_blocks = hit_tokens = 0
    for index, keys in enumerate(requests):
        blocks = [tuple(keys[: depth + 1]) for depth in range(len(keys))]
        limit = len(blocks) if matchable is None else min(len(blocks), matchable[index])
        tokens = weights[index] if weights is not None else [1] * len(blocks)
        if index >= measure_from:
            for depth in range(limit):
                if blocks[depth] not in cache:
                    break
                hit_blocks += 1
                hit_tokens += tokens[depth]
        for block in reversed(blocks):
            cache[block] = None
            cache.move_to_end(block)
            while len(cache) > capacity:
                cache.popitem(last=False)
    return hit_blocks, hit_tokens


def test_shared_head_by_hand():
    # stacks (most recent first): after R0 a b; after R1 a c b; R2's a is at 1 and its b at 3
    curve = lru_curve([["a", "b"], ["a", "c"], ["a", "b"]])
    assert [curve.hits(c) for c in range(6)] == [0, 2, 2, 3, 3, 3]
    assert curve.total_blocks == 6
    assert curve.ceiling_blocks == 3
    assert curve.distinct_blocks == 3
    assert curve.at([1, 3]) == [2, 3]
    assert curve.hit_rate(3) == 0.5


def test_measure_from_counts_only_later_requests():
    curve = lru_curve([["a", "b"], ["a", "c"], ["a", "b"]], measure_from=2)
    assert [curve.hits(c) for c in range(5)] == [0, 1, 1, 2, 2]
    assert curve.total_blocks == 2
    # a, b and c were all referenced before counting starts
    assert curve.warm_blocks == 3


def test_a_request_longer_than_the_cache_keeps_its_head():
    curve = lru_curve([["a", "b", "c"], ["a", "b", "c"]])
    assert [curve.hits(c) for c in range(5)] == [0, 1, 2, 3, 3]


def test_matchable_stops_hits_but_not_caching():
    curve = lru_curve([["a", "b", "c"], ["a", "b", "c"]], matchable=[3, 2])
    assert [curve.hits(c) for c in range(5)] == [0, 1, 2, 2, 2]
    # the unmatchable c was still cached by R1: R2 finds it at position 3
    curve = lru_curve([["a", "b", "c"], ["a", "b", "c"], ["a", "b", "c"]], matchable=[3, 2, 3])
    assert curve.hits(3) == 5


def test_the_same_key_after_another_prefix_is_another_block():
    # R1's y follows z, not x: a different block; R2 finds x at position 3 and x/y at 4
    curve = lru_curve([["x", "y"], ["z", "y"], ["x", "y"]])
    assert [curve.hits(c) for c in range(6)] == [0, 0, 0, 1, 2, 2]


def test_token_weights():
    # a partial last block of 100 tokens
    curve = lru_curve([["a", "b"], ["a", "b"]], weights=[[512, 100], [512, 100]])
    assert [curve.hit_tokens(c) for c in range(4)] == [0, 512, 612, 612]
    assert curve.total_tokens == 1224
    assert curve.hit_rate(2) == 0.5


def test_empty_workloads():
    assert lru_curve([]).hits(10) == 0
    curve = lru_curve([[], ["a"], []])
    assert curve.hits(10) == 0 and curve.total_blocks == 1


@st.composite
def workloads(draw, max_requests=14):
    """Requests that extend earlier ones (shared prefixes, repeats) or start fresh, over a few keys so that
    the same key also turns up after different prefixes."""
    requests: list[list[int]] = []
    for _ in range(draw(st.integers(1, max_requests))):
        head: list[int] = []
        if requests and draw(st.booleans()):
            base = draw(st.sampled_from(requests))
            head = base[: draw(st.integers(0, len(base)))]
        requests.append(head + draw(st.lists(st.integers(0, 5), max_size=4)))
    matchable = draw(st.none() | st.lists(st.integers(0, 8), min_size=len(requests), max_size=len(requests)))
    weights = draw(st.none() | st.just([[1 + (k * 7 + i) % 5 for i, k in enumerate(r)] for r in requests]))
    measure_from = draw(st.integers(0, len(requests)))
    return requests, matchable, weights, measure_from


@settings(max_examples=300, deadline=None)
@given(workloads())
def test_one_pass_equals_simulation_at_every_capacity(workload):
    requests, matchable, weights, measure_from = workload
    curve = lru_curve(requests, matchable=matchable, weights=weights, measure_from=measure_from)
    for capacity in range(curve.distinct_blocks + 2):
        expected = brute_force_lru(requests, capacity, matchable, weights, measure_from)
        assert (curve.hits(capacity), curve.hit_tokens(capacity)) == expected, capacity
        point = simulate_lru(
            requests, capacity, matchable=matchable, weights=weights, measure_from=measure_from
        )
        assert (point.hit_blocks, point.hit_tokens) == expected, capacity


@settings(max_examples=100, deadline=None)
@given(workloads())
def test_the_curve_rises_to_the_ceiling(workload):
    requests, matchable, weights, measure_from = workload
    curve = lru_curve(requests, matchable=matchable, weights=weights, measure_from=measure_from)
    hits = [curve.hits(c) for c in range(curve.distinct_blocks + 2)]
    assert hits == sorted(hits)
    assert hits[-1] == curve.ceiling_blocks <= curve.total_blocks
    assert curve.hits(10**9) == curve.ceiling_blocks
