"""The first pass's sketch (heavy_blocks.py): a block referenced the threshold's times is always found, and
blocks referenced once are not (their counters are shared by few)."""

from __future__ import annotations

import numpy as np

from kvtui.whatif.heavy_blocks import HeavyBlocks


def test_a_block_at_the_threshold_is_heavy_and_one_below_is_not():
    heavy = HeavyBlocks(threshold=5, expected_references=1000)
    shared = np.array([11, 22], dtype=np.uint64)
    heavy.add(np.repeat(shared, [5, 4]))
    assert heavy.of(shared).tolist() == [True, False]


def test_counts_are_never_low_and_singletons_stay_light():
    rng = np.random.default_rng(3)
    singletons = rng.integers(0, 2**63, 200_000, dtype=np.int64).view(np.uint64)
    popular = rng.integers(0, 2**63, 50, dtype=np.int64).view(np.uint64)
    heavy = HeavyBlocks(threshold=20, expected_references=400_000)
    # added in two batches, with each popular block 20 times
    heavy.add(np.concatenate([singletons[:100_000], np.repeat(popular, 10)]))
    heavy.add(np.concatenate([singletons[100_000:], np.repeat(popular, 10)]))
    assert heavy.of(popular).all()
    assert heavy.of(singletons).mean() < 0.001


def test_nothing_is_heavy_before_a_count():
    assert not HeavyBlocks(threshold=1, expected_references=10).of(np.arange(5, dtype=np.uint64)).any()
