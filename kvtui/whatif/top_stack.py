"""The exact hits at every capacity up to `kmax` blocks, beside a sampled pass (sampled.py), in memory bounded
by kmax and the longest request rather than by the trace: top_stack.c.

    top = ExactTop(kmax=25_600)
    top.add(prefix_hashes, starts, may_hit)     # every block reference, a flat batch of requests at a time
    top.hist[p]                                 # references that may hit at stack position p (1..kmax)

A sampled block stands for 1 / rate blocks, so a stack position under about 10 / rate blocks is a handful of
sampled blocks deep and the sampled curve is points off there. The top of the stack is small, though: a block
with kmax blocks above it can only come back within kmax by being referenced again, when it starts afresh at
the top. So the top is kept exactly from every reference, and the sampled curve is used only above it. Where
no C compiler is at hand (stack_kernel.py), `available()` is False and the curve is sampled throughout.
"""

from __future__ import annotations

import weakref

import numpy as np

from kvtui.whatif.stack_kernel import top_stack

__all__ = ["ExactTop", "available"]


def available() -> bool:
    return top_stack() is not None


class ExactTop:
    def __init__(self, kmax: int):
        functions = top_stack()
        if functions is None:
            raise RuntimeError("the exact top of the stack needs a C compiler (stack_kernel.why_not)")
        new, self._add, free, self._held = functions
        self.kmax = kmax
        self.hist = np.zeros(kmax + 1, dtype=np.int64)
        self._stack = new(kmax)
        if not self._stack:
            raise MemoryError("top_stack_new: out of memory")
        weakref.finalize(self, free, self._stack)

    def add(self, hashes: np.ndarray, starts: np.ndarray, may_hit: np.ndarray) -> None:
        """Requests in arrival order: request i's prefix hashes are hashes[starts[i]:starts[i + 1]]."""
        hashes = np.ascontiguousarray(hashes, dtype=np.uint64)
        starts = np.ascontiguousarray(starts, dtype=np.int64)
        may_hit = np.ascontiguousarray(may_hit, dtype=np.uint8)
        status = self._add(
            self._stack,
            hashes.ctypes.data,
            starts.ctypes.data,
            len(starts) - 1,
            may_hit.ctypes.data,
            self.hist.ctypes.data,
        )
        if status:
            raise MemoryError("top_stack_add: out of memory")

    @property
    def held(self) -> int:
        """The blocks kept now: at most kmax and the longest request's."""
        return self._held(self._stack)
