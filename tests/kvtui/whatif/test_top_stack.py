"""The exact top of the stack (top_stack.py, top_stack.c) counts every reference's position up to kmax as the
whole one pass does (stack_pass.py), batch by batch, while holding at most kmax blocks and a request's."""

from __future__ import annotations

import numpy as np
import pytest

from kvtui.whatif.block_table import PrefixTable, depths_of, prefix_hashes
from kvtui.whatif.stack_pass import CurveBuilder
from kvtui.whatif.top_stack import ExactTop, available

pytestmark = pytest.mark.skipif(not available(), reason="no C compiler here: the curve is sampled throughout")


def flat(requests, limits=None):
    keys = np.array([k for r in requests for k in r], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum([len(r) for r in requests])]).astype(np.int64)
    limits = [len(r) - 1 for r in requests] if limits is None else limits
    may_hit = depths_of(starts, len(keys)) < np.repeat(np.array(limits), np.diff(starts))
    return keys, starts, may_hit


def whole_pass(keys, starts, may_hit) -> np.ndarray:
    """Every reference's position, from the one pass over every block."""
    builder = CurveBuilder()
    builder.add_batch(PrefixTable().intern(keys, starts), starts, may_hit)
    return builder.hist[0]


def top_pass(keys, starts, may_hit, kmax: int, batches: int = 3) -> ExactTop:
    top = ExactTop(kmax)
    hashes = prefix_hashes(keys, starts)
    cuts = np.linspace(0, len(starts) - 1, batches + 1).astype(np.int64)
    for a, b in zip(cuts[:-1], cuts[1:]):
        lo, hi = starts[a], starts[b]
        top.add(hashes[lo:hi], starts[a : b + 1] - lo, may_hit[lo:hi])
    return top


def agree(requests, kmax: int, limits=None) -> ExactTop:
    keys, starts, may_hit = flat(requests, limits)
    truth = whole_pass(keys, starts, may_hit)
    top = top_pass(keys, starts, may_hit, kmax)
    reach = min(kmax + 1, len(truth))
    assert top.hist[1:reach].tolist() == truth[1:reach].tolist()
    assert not top.hist[reach:].any()
    return top


@pytest.mark.parametrize("kmax", [1, 2, 3, 5, 8, 40])
def test_branching_prompts(kmax):
    agree([[1, 2, 3], [1, 2], [4], [1, 2, 3, 5], [4, 6], [1], [7, 8, 9, 10]] * 30, kmax)


@pytest.mark.parametrize("seed", range(6))
def test_random_prefix_trees(seed):
    # prompts that share prefixes of random depth in a small tree, so positions move both ways
    rng = np.random.default_rng(seed)
    requests = []
    for _ in range(600):
        depth = int(rng.integers(1, 12))
        requests.append([int(rng.integers(0, 3 if d < 4 else 40)) for d in range(depth)])
    limits = [int(rng.integers(0, len(r) + 1)) for r in requests]
    for kmax in (1, 4, 17, 64, 300):
        agree(requests, kmax, limits)


def test_memory_is_bounded_by_the_top():
    # 20,000 requests of 20 blocks, most never seen again: the top holds kmax blocks and a request's
    rng = np.random.default_rng(5)
    requests = [[0, 1, *rng.integers(2, 1 << 40, 18).tolist()] for _ in range(20_000)]
    top = agree(requests, 100)
    assert top.held <= 100 + 20
    assert top.hist[1] == top.hist[2] == 19_999
