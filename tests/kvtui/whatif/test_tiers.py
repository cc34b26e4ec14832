"""kvtui/whatif/tiers.py: the hits per tier read off the one-pass curve equal an independent exclusive
hierarchy (device, host, disk as separate LRU lists that demote and promote blocks), by hand and on random
workloads; the surface and the curve per tier are the same reads."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings

from kvtui.whatif.curve import lru_curve
from kvtui.whatif.tier_cost import TierCost
from kvtui.whatif.tiers import log_grid, tier_curve, tier_points, tier_split, tier_surface
from tests.kvtui.whatif.test_curve import workloads


def exclusive_hierarchy(requests, capacities, matchable=None, weights=None, measure_from=0):
    """Hit tokens per tier of the model written out with no stack distances: a block is its whole prefix; a
    request's leading blocks hit while each is in some tier (the first miss ends it); then its blocks are
    used tail first, each moved to the device's most recent end; a tier over its capacity demotes its least
    recent block to the next tier, the last tier drops it."""
    tiers = [OrderedDict() for _ in capacities]
    hits = [0] * len(capacities)

    def place(level: int, block: tuple) -> None:
        tier = tiers[level]
        tier[block] = None
        while len(tier) > capacities[level]:
            victim, _ = tier.popitem(last=False)
            if level + 1 < len(tiers):
                place(level + 1, victim)

    for index, keys in enumerate(requests):
        blocks = [tuple(keys[: depth + 1]) for depth in range(len(keys))]
        limit = len(blocks) if matchable is None else min(len(blocks), matchable[index])
        tokens = weights[index] if weights is not None else [1] * len(blocks)
        if index >= measure_from:
            for depth in range(limit):
                where = next((t for t, tier in enumerate(tiers) if blocks[depth] in tier), None)
                if where is None:
                    break
                hits[where] += tokens[depth]
        for block in reversed(blocks):
            for tier in tiers:
                tier.pop(block, None)
            place(0, block)
    return hits


def test_by_hand_a_request_found_below_the_device():
    # after R1 the recency stack is c d a b: R2's a is at 3 and its b at 4
    requests = [["a", "b"], ["c", "d"], ["a", "b"]]
    curve = lru_curve(requests)
    split = tier_split(curve, 2, 2)
    assert (split.device, split.host, split.disk) == (0, 2, 0)
    assert exclusive_hierarchy(requests, [2, 2, 0]) == [0, 2, 0]
    # a bigger device keeps a; b is on the host
    split = tier_split(curve, 3, 1)
    assert (split.device, split.host, split.disk) == (1, 1, 0)
    # host of one block, disk of two: a on the host, b on disk
    split = tier_split(curve, 2, 1, 2)
    assert (split.device, split.host, split.disk) == (0, 1, 1)
    assert exclusive_hierarchy(requests, [2, 1, 2]) == [0, 1, 1]
    # a block in each tier: a (3rd) on disk, b (4th) nowhere
    split = tier_split(curve, 1, 1, 1)
    assert (split.device, split.host, split.disk) == (0, 0, 1)
    assert exclusive_hierarchy(requests, [1, 1, 1]) == [0, 0, 1]


@settings(max_examples=150, deadline=None)
@given(workloads())
def test_the_split_equals_an_exclusive_hierarchy_at_every_device_capacity(workload):
    requests, matchable, weights, measure_from = workload
    curve = lru_curve(requests, matchable=matchable, weights=weights, measure_from=measure_from)
    top = curve.distinct_blocks
    for device in range(top + 2):
        for host, disk in ((0, 0), (1, 0), (2, 1), (max(1, top // 2), 2), (top, top)):
            split = tier_split(curve, device, host, disk)
            expected = exclusive_hierarchy(requests, [device, host, disk], matchable, weights, measure_from)
            assert [split.device, split.host, split.disk] == expected, (device, host, disk)


def test_points_are_every_device_host_disk_triple_and_rates_add_up():
    requests = [["s", "a"], ["s", "b"], ["s", "c"], ["s", "a"], ["s", "b"], ["s", "c"]]
    curve = lru_curve(requests, weights=[[4, 4]] * 6)
    prompt = 6 * 8
    cost = TierCost(bytes_per_token=1000, parameters=1e9, host_bandwidth=1e9, disk_bandwidth=1e8, flops=1e12)
    points = tier_points(curve, 4, [4, 8], [4, 8], [0, 4], prompt, cost, trace_seconds=3600.0)
    assert [(p["capacity_tokens"], p["host_capacity_tokens"], p["disk_capacity_tokens"]) for p in points] == [
        (d, h, k) for d in (4, 8) for h in (4, 8) for k in (0, 4)
    ]
    for p in points:
        split = tier_split(
            curve, p["capacity_tokens"] // 4, p["host_capacity_tokens"] // 4, p["disk_capacity_tokens"] // 4
        )
        assert p["tiers"] == split.rates(prompt)
        assert abs(sum(p["tiers"].values()) - p["token_hit_rate"]) < 1e-12
        # 2 x 1e9 / 1e12 = 2 ms to compute a token; 1 us from host, 10 us from disk
        assert p["prefill_seconds_saved"] == pytest.approx(
            split.host * (2e-3 - 1e-6) + split.disk * (2e-3 - 1e-5)
        )
        assert p["gpu_hours_per_day"] == pytest.approx(p["prefill_seconds_saved"] / 3600 * 24)
    # s hits on a one-block device from R1 on; at R3..R5 the second block is 4th in the stack (s c b a)
    assert [(p["tiers"]["device"], p["tiers"]["host"], p["tiers"]["disk"]) for p in points[:4]] == [
        (20 / prompt, 0.0, 0.0),
        (20 / prompt, 0.0, 0.0),
        (20 / prompt, 0.0, 0.0),
        (20 / prompt, 0.0, 12 / prompt),
    ]
    # a two-block device and a two-block host hold four: the second blocks are host hits
    assert points[6]["tiers"] == {"device": 20 / prompt, "host": 12 / prompt, "disk": 0.0}
    assert points[0]["prefill_seconds_saved"] == 0.0 and points[6]["prefill_seconds_saved"] > 0


def test_the_surface_and_the_curve_per_tier_are_reads_of_the_same_curve():
    requests = [[i % 5, 10 + i % 3] for i in range(40)]
    curve = lru_curve(requests)
    cost = TierCost()
    surface = tier_surface(curve, 1, 0, curve.total_tokens, cost, n=5)
    assert surface["host_tokens"][0] == 0 and surface["prefill_seconds_saved"] is None
    assert surface["device_tokens"] == log_grid(curve.distinct_blocks, 5)
    for i, d in enumerate(surface["device_tokens"]):
        # host 0 is the device-only curve
        assert surface["token_hit_rate"][i][0] == curve.hit_rate(d)
        for j, h in enumerate(surface["host_tokens"]):
            assert surface["token_hit_rate"][i][j] == curve.hit_rate(d + h)
        # more host never hits less
        assert surface["token_hit_rate"][i] == sorted(surface["token_hit_rate"][i])
    per_tier = tier_curve(curve, 1, 2, 3, curve.total_tokens, n=6)
    for p in per_tier:
        split = tier_split(curve, p["capacity_tokens"], 2, 3)
        assert (p["device"], p["host"], p["disk"]) == tuple(
            x / curve.total_tokens for x in (split.device, split.host, split.disk)
        )
