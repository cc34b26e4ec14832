"""The sampled one-pass curve (sampled.py): with its first pass, the blocks many requests share are kept whole
and the curve is within half a point of the exact one where plain SHARDS is points off; the error estimate
covers the error; a whole sample is the exact curve."""

from __future__ import annotations

import numpy as np
import pytest

from kvtui.whatif import onepass
from tests.kvtui.whatif.test_compact_one_pass import generated

BLOCK = 128


@pytest.fixture(scope="module")
def workload():
    # about a million block references at 128 tokens a block, under shared system and app prompts
    return generated(10_000, seed=11)


@pytest.fixture(scope="module")
def truth(workload):
    return onepass.of_workload(workload, BLOCK, keep_chains=False).curve()


def resolved(curve, rate: float) -> list[int]:
    """Capacities from 10 / rate blocks (below, a position is a handful of sampled blocks) to the top."""
    top = curve.distinct_blocks
    return [int(c) for c in np.unique(np.geomspace(10 / rate, top, 60).astype(np.int64))]


def worst(estimate, truth, capacities) -> float:
    return max(abs(estimate.hit_rate(c) - truth.hit_rate(c)) for c in capacities)


@pytest.mark.parametrize(("rate", "seed", "points"), [(0.1, 1, 0.005), (0.1, 3, 0.005), (0.01, 2, 0.02)])
def test_the_two_pass_sample_is_close_to_the_exact_curve(workload, truth, rate, seed, points):
    estimate = onepass.of_workload(workload, BLOCK, sample=rate, seed=seed).curve()
    assert estimate.sampled and estimate.total_tokens == truth.total_tokens
    assert worst(estimate, truth, resolved(truth, rate)) < points


def test_plain_shards_is_points_off_on_the_same_workload(workload, truth):
    # no first pass: a shared prompt's block is in the sample or not, and moves the curve above the exact top
    plain = onepass.OnePass(BLOCK, sample=0.01, seed=2)
    for request in workload.requests:
        plain.add_request(request)
    above_top = [c for c in resolved(truth, 0.01) if c > plain.sampler.fine]
    # seed 2 leaves a shared prompt's block out (the figures are the same on every run)
    assert worst(plain.curve(), truth, above_top) > 0.03


def test_the_error_estimate_covers_the_error(workload, truth):
    estimate = onepass.of_workload(workload, BLOCK, sample=0.01, seed=1).curve()
    for capacity in resolved(truth, 0.01):
        error = estimate.hit_rate_error(capacity)
        assert abs(estimate.hit_rate(capacity) - truth.hit_rate(capacity)) <= 4 * error + 0.01, capacity
    assert 0 < estimate.hit_rate_error(truth.distinct_blocks) < 0.02


def test_every_capacity_up_to_the_fine_limit_is_kept(workload, truth):
    one = onepass.of_workload(workload, BLOCK, sample=0.1, seed=1)
    curve = one.curve()
    # a system prompt's blocks sit a few places deep: capacity 3 and 4 are told apart, not both read at 0
    assert curve.fine == one.sampler.fine == 2560
    assert curve.hits(3) != curve.hits(9)
    assert abs(curve.hit_rate(5) - truth.hit_rate(5)) < 0.01


@pytest.mark.parametrize(("rate", "seed"), [(0.01, 1), (0.001, 4)])
def test_the_curve_is_exact_up_to_the_fine_limit(workload, truth, rate, seed):
    # the exact top of the stack (top_stack.py): under 10 / rate blocks a sampled position is a few blocks deep
    one = onepass.of_workload(workload, BLOCK, sample=rate, seed=seed)
    curve = one.curve()
    for capacity in (1, 2, 5, 30, 100, 1000, 5000, one.sampler.fine):
        assert curve.hits(capacity) == truth.hits(capacity), capacity
        assert curve.hit_rate_error(capacity) == 0.0
    if rate == 0.01:
        # above the top the sampled rise has its spread again
        assert curve.hit_rate_error(one.sampler.fine + 1000) > 0.0
