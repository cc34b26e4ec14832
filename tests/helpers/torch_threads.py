"""A block run on a given number of torch threads, the caller's count restored after it.

MKL splits a product's rows among its threads, and a thread's share of 1-3 rows sums in another order: a test
that compares with MKL bit for bit at a few dozen rows runs on few threads, so a many-core CI runner gives
every share 4 rows or more as a 2-core one does."""

from __future__ import annotations

from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(count: int):
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
