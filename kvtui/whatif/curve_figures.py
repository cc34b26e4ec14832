"""What the one-pass curve answers (curve.py builds it, stack_pass.py and sampled.py fill it): hits at every
LRU capacity, in compact arrays."""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def sampled_index(blocks, rate: float, fine: int):
    """Where a sampled curve keeps capacity `blocks` (an int or an int64 array): every capacity up to `fine`,
    then one index for every 1 / rate blocks."""
    if isinstance(blocks, np.ndarray):
        coarse = fine + ((blocks - fine) * rate).astype(np.int64)
        return np.where(blocks <= fine, blocks, coarse)
    return blocks if blocks <= fine else fine + int((blocks - fine) * rate)


@dataclass(frozen=True)
class Curve:
    """Hits at every LRU capacity. `block_cum[i]`: blocks that hit at capacity i / `rate` (i up to the
    distinct blocks seen; beyond it nothing changes); `token_cum[i]` the same in tokens, or None when every
    block holds `block_tokens` tokens. Compact arrays of ints (8 bytes a capacity), compared whole with ==.
    A sampled curve (sampled.py) has `rate` < 1, keeps every capacity up to `fine` and then one in 1 / rate
    (sampled_index), and `error_cum[i]`: the standard error of block_cum[i]."""

    block_cum: array
    token_cum: array | None
    # blocks and tokens of the counted requests (those from `measure_from` on)
    total_blocks: int
    total_tokens: int
    requests: int
    measure_from: int
    # distinct blocks (prefix-tree nodes) in the whole workload: the capacity at which the curve is flat
    distinct_blocks: int
    # distinct blocks referenced before `measure_from`: capacities above it are not full when counting starts
    warm_blocks: int
    block_tokens: int = 1
    rate: float = 1.0
    error_cum: array | None = None
    fine: int = 0

    @property
    def sampled(self) -> bool:
        return self.rate < 1.0

    def _index(self, capacity_blocks) -> int:
        scaled = int(capacity_blocks)
        if self.rate < 1.0:
            scaled = sampled_index(max(scaled, 0), self.rate, self.fine)
        return max(0, min(scaled, len(self.block_cum) - 1))

    def hits(self, capacity_blocks: int) -> int:
        """Hit blocks with a cache of `capacity_blocks` blocks."""
        return self.block_cum[self._index(capacity_blocks)]

    def hit_tokens(self, capacity_blocks: int) -> int:
        """Hit tokens (the weights given to lru_curve; blocks when none were given)."""
        if self.token_cum is None:
            return self.hits(capacity_blocks) * self.block_tokens
        return self.token_cum[self._index(capacity_blocks)]

    def hit_rate(self, capacity_blocks: int) -> float:
        """Hit tokens / counted tokens (0.0 when nothing is counted)."""
        return self.hit_tokens(capacity_blocks) / self.total_tokens if self.total_tokens else 0.0

    def hit_rate_error(self, capacity_blocks: int) -> float:
        """The standard error of hit_rate (0.0 for an exact curve)."""
        if self.error_cum is None or not self.total_blocks:
            return 0.0
        return self.error_cum[self._index(capacity_blocks)] / self.total_blocks

    def block_hit_rate(self, capacity_blocks: int) -> float:
        return self.hits(capacity_blocks) / self.total_blocks if self.total_blocks else 0.0

    def at(self, capacities: Sequence[int]) -> list[int]:
        """Hit blocks at each capacity."""
        return [self.hits(c) for c in capacities]

    def smallest_reaching(self, hit_tokens: float) -> int | None:
        """The fewest blocks whose hit tokens reach `hit_tokens` (None: not even an infinite cache does)."""
        cum = self.block_cum if self.token_cum is None else self.token_cum
        scale = self.block_tokens if self.token_cum is None else 1
        low, high = 0, len(cum) - 1
        if cum[high] * scale < hit_tokens:
            return None
        while low < high:
            mid = (low + high) // 2
            if cum[mid] * scale >= hit_tokens:
                high = mid
            else:
                low = mid + 1
        if self.rate == 1.0 or low <= self.fine:
            return low
        return self.fine + math.ceil((low - self.fine) / self.rate)

    @property
    def ceiling_blocks(self) -> int:
        """Hit blocks with an infinite cache."""
        return self.block_cum[-1]

    @property
    def ceiling_tokens(self) -> int:
        return self.block_cum[-1] * self.block_tokens if self.token_cum is None else self.token_cum[-1]
