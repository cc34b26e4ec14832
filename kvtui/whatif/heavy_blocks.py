"""The blocks that many requests share, counted in a first pass so that a sampled pass (sampled.py) keeps
them whole instead of sampling them.

    heavy = HeavyBlocks(threshold=100, expected_references=10**8)
    heavy.add(prefix_hashes)          # every block reference of the first pass
    heavy.of(prefix_hashes)           # True where a block was referenced at least `threshold` times

A count-min sketch: two rows of 16-bit counters (held at 65,535), each block counted in one counter per row by other bits of
its prefix hash than the sample's, and its count read as the smaller of the two. A count is never low, so
every block referenced `threshold` times is found; a block counted high by collisions is only kept whole
when it need not be (exact, and a little more memory). Rows are sized for about a quarter of `threshold`
references a counter: 4 bytes a counter, `expected_references` / `threshold` x 16 bytes in all.
"""

from __future__ import annotations

import numpy as np

from kvtui.whatif.block_table import mix64

__all__ = ["HeavyBlocks"]

# salts that give each row its own bits of a prefix hash
_SALTS = (np.uint64(0x243F6A8885A308D3), np.uint64(0x13198A2E03707344))


class HeavyBlocks:
    def __init__(self, threshold: int, expected_references: int):
        self.threshold = min(max(int(threshold), 1), np.iinfo(np.uint16).max)
        width = 1 << 16
        while width < 4 * expected_references / self.threshold:
            width *= 2
        self.rows = np.zeros((len(_SALTS), width), dtype=np.uint16)
        self.counted = 0

    def _index(self, hashes: np.ndarray, row: int) -> np.ndarray:
        return (mix64(hashes ^ _SALTS[row]) & np.uint64(self.rows.shape[1] - 1)).astype(np.intp)

    def add(self, hashes: np.ndarray) -> None:
        """Count each reference (uint64 prefix hashes; a hash may repeat)."""
        self.counted += len(hashes)
        for row in range(len(_SALTS)):
            # sorted and counted: a few times faster than np.add.at into a table past the caches
            at, times = np.unique(self._index(hashes, row), return_counts=True)
            # 16 bits a counter, held at their top: a count past it is heavy at any threshold asked
            summed = self.rows[row][at] + times
            self.rows[row][at] = np.minimum(summed, np.iinfo(np.uint16).max)

    def of(self, hashes: np.ndarray) -> np.ndarray:
        """Which of these blocks were referenced at least `threshold` times (none before any count)."""
        if not self.counted:
            return np.zeros(len(hashes), dtype=bool)
        low = self.rows[0][self._index(hashes, 0)]
        for row in range(1, len(_SALTS)):
            low = np.minimum(low, self.rows[row][self._index(hashes, row)])
        return low >= self.threshold
