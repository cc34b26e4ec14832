"""kvtui/whatif/optimal.py: Belady's bound, by hand, against LRU and the ceiling, and against every choice."""

from __future__ import annotations

import functools
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from kvtui.whatif.curve import lru_curve
from kvtui.whatif.optimal import belady
from kvtui.whatif.prefix_nodes import chain_nodes


def best_possible(requests, capacity, matchable=None, measure_from=0):
    """Every eviction choice tried: after each request the cache is any set of at most `capacity` blocks
    from what it held and the request's blocks; the most hit blocks over all such schedules."""
    chains, _ = chain_nodes(requests)

    @functools.cache
    def best(index, cache):
        if index == len(chains):
            return 0
        nodes = chains[index]
        limit = len(nodes) if matchable is None else min(len(nodes), matchable[index])
        hits = 0
        if index >= measure_from:
            while hits < limit and nodes[hits] in cache:
                hits += 1
        pool = sorted(set(cache) | set(nodes))
        after = max(
            best(index + 1, frozenset(keep))
            for size in range(min(capacity, len(pool)) + 1)
            for keep in itertools.combinations(pool, size)
        )
        return hits + after

    return best(0, frozenset())


def test_cyclic_pattern_beats_lru():
    # LRU with 2 slots misses every time on a cycle of 3; Belady keeps a and b for their next use
    requests = [["a"], ["b"], ["c"], ["a"], ["b"], ["c"]]
    assert lru_curve(requests).hits(2) == 0
    assert [p.hit_blocks for p in belady(requests, [0, 1, 2, 3])] == [0, 1, 2, 3]


def test_keeps_the_block_used_next_not_the_newest():
    # LRU (2 slots) drops x for y, which never comes back; Belady bypasses y
    requests = [["s", "x"], ["s", "y"], ["s", "x"]]
    assert lru_curve(requests).hits(2) == 2
    point = belady(requests, [2])[0]
    assert (point.hit_blocks, point.total_blocks) == (3, 6)


def test_tokens_and_window():
    requests = [["s", "x"], ["s", "y"], ["s", "x"]]
    point = belady(requests, [2], weights=[[512, 10], [512, 20], [512, 30]], measure_from=2)[0]
    assert (point.hit_blocks, point.hit_tokens, point.total_tokens) == (2, 542, 542)
    assert point.hit_rate == 1.0


def test_matchable_uses_do_not_count():
    # x's use in R1 cannot hit (matchable 1), so with one spare slot Belady keeps y for R2
    requests = [["s", "x"], ["s", "y"], ["s", "x"], ["s", "y"]]
    hits = belady(requests, [2], matchable=[2, 2, 1, 2])[0].hit_blocks
    assert hits == 4 == best_possible(requests, 2, matchable=[2, 2, 1, 2])


@st.composite
def workloads(draw, max_requests=12, keys=5, max_new=4):
    requests: list[list[int]] = []
    for _ in range(draw(st.integers(1, max_requests))):
        head: list[int] = []
        if requests and draw(st.booleans()):
            base = draw(st.sampled_from(requests))
            head = base[: draw(st.integers(0, len(base)))]
        requests.append(head + draw(st.lists(st.integers(0, keys), max_size=max_new)))
    matchable = draw(st.none() | st.lists(st.integers(0, 6), min_size=len(requests), max_size=len(requests)))
    measure_from = draw(st.integers(0, len(requests)))
    return requests, matchable, measure_from


@settings(max_examples=150, deadline=None)
@given(workloads())
def test_between_lru_and_the_ceiling(workload):
    requests, matchable, measure_from = workload
    curve = lru_curve(requests, matchable=matchable, measure_from=measure_from)
    capacities = list(range(curve.distinct_blocks + 2))
    points = belady(requests, capacities, matchable=matchable, measure_from=measure_from)
    for capacity, point in zip(capacities, points):
        assert curve.hits(capacity) <= point.hit_blocks <= curve.ceiling_blocks, capacity
    # with room for everything, the optimum is the ceiling
    assert points[-1].hit_blocks == curve.ceiling_blocks


@settings(max_examples=150, deadline=None)
@given(workloads(max_requests=5, keys=3, max_new=2))
def test_equals_trying_every_choice(workload):
    requests, matchable, measure_from = workload
    capacities = [0, 1, 2, 3, 4]
    points = belady(requests, capacities, matchable=matchable, measure_from=measure_from)
    for capacity, point in zip(capacities, points):
        assert point.hit_blocks == best_possible(requests, capacity, matchable, measure_from), capacity
