"""The slot tree's loop in C (stack_kernel.py, stack_runs.c) gives the curve its Python loop gives: exact,
with a warm-up, in small batches, and sampled with stack weights."""

from __future__ import annotations

import pytest

from kvtui.whatif import onepass, stack_pass
from kvtui.whatif.curve import lru_curve
from kvtui.whatif.stack_kernel import stack_runs
from tests.kvtui.whatif.test_compact_one_pass import generated


@pytest.fixture(scope="module")
def workload():
    return generated(3000, seed=9)


def both(monkeypatch, make):
    """make() with the C loop, then with the Python one."""
    if stack_runs() is None:
        pytest.skip("no C compiler here: the Python loop is the only one")
    with_c = make()
    monkeypatch.setattr(stack_pass, "stack_runs", lambda: None)
    return with_c, make()


def test_the_exact_curve_in_small_batches(monkeypatch, workload):
    def make():
        one = onepass.OnePass(256, keep_chains=False, batch_blocks=5_000)
        for request in workload.requests:
            one.add_request(request)
        return one.curve()

    with_c, in_python = both(monkeypatch, make)
    assert with_c == in_python and with_c.ceiling_blocks > 0


def test_a_warm_up_and_token_weights(monkeypatch):
    requests = [[1, 2, 3], [1, 2], [4], [1, 2, 3, 5], [4, 6], [1]] * 40
    weights = [[len(r) + i for i in range(len(r))] for r in requests]

    def make():
        return lru_curve(requests, weights=weights, measure_from=50, matchable=[2] * len(requests))

    with_c, in_python = both(monkeypatch, make)
    assert with_c == in_python and with_c.warm_blocks > 0


def test_the_sampled_curve(monkeypatch, workload):
    def make():
        return onepass.of_workload(workload, 256, sample=0.05, seed=3).curve()

    with_c, in_python = both(monkeypatch, make)
    assert with_c == in_python and with_c.sampled
