"""The physical block pool: fixed-size blocks, a free list, ref counts, and the events that describe them.

A block holds the K/V of `block_size` consecutive positions of one sequence (in every full-attention layer;
the tensors live in `engine.worker.paged_kv.PagedKV`). The pool only does bookkeeping: which blocks are free, who
references each block, and what to do when the last reference goes (free it, or let a prefix cache keep it
as an evictable cached block). Every change is emitted as a trace event so a replay can rebuild the pool.

Block states: free (on the free list), used (ref count >= 1), cached (ref count 0, kept by the prefix cache,
reclaimable on demand).
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Protocol

from engine.trace import TraceSink


class BlockCache(Protocol):
    """What the pool asks of a prefix cache (engine.core.radix): keep blocks whose last owner left, give them back."""

    def keep_on_release(self, physical: int) -> bool:
        """The last reference to `physical` is gone: return True to keep it cached (evictable)."""

    def evict_one(self) -> int | None:
        """Reclaim one cached block (the policy's choice) and return its id, or None when nothing is evictable."""

    def num_evictable(self) -> int:
        """Cached blocks that could be reclaimed right now."""

    def holds(self, physical: int) -> bool:
        """The block is in the prefix tree: its contents must not change even if one request owns it."""


class OutOfBlocks(RuntimeError):
    """No free block and nothing evictable: the scheduler waits or preempts."""


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int, trace: TraceSink):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"the pool needs at least one block of one token (got {num_blocks} x {block_size})")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.trace = trace
        self.ref_counts = [0] * num_blocks
        self.free: deque[int] = deque(range(num_blocks))
        self.cache: BlockCache | None = None
        # Called with (src, dst) when a block's contents must be copied (copy-on-write); set by the KV store.
        self.on_copy: Callable[[int, int, int], None] | None = None

    # --- capacity -------------------------------------------------------------------------------------
    def num_free(self) -> int:
        return len(self.free)

    def num_available(self) -> int:
        """Blocks an allocation could get: free ones plus cached ones that may be evicted."""
        return len(self.free) + (self.cache.num_evictable() if self.cache else 0)

    def can_allocate(self, n: int) -> bool:
        """n blocks are free, or can be made free by eviction (the tree walk only when the free list is short)."""
        return n <= len(self.free) or n <= self.num_available()

    def num_used(self) -> int:
        return sum(1 for count in self.ref_counts if count > 0)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # --- references -----------------------------------------------------------------------------------
    def allocate(self, request_id: str, logical: int) -> int:
        if not self.free and self.cache is not None:
            evicted = self.cache.evict_one()
            if evicted is not None:
                self.free.append(evicted)
        if not self.free:
            raise OutOfBlocks(f"no free block for {request_id} (pool of {self.num_blocks} blocks is full)")
        physical = self.free.popleft()
        assert self.ref_counts[physical] == 0, f"free block {physical} has references"
        self.ref_counts[physical] = 1
        self.trace.emit("block_allocated", physical=physical, request_id=request_id, logical=logical)
        return physical

    def share(self, physical: int, request_id: str, logical: int) -> None:
        """Add an existing block (used or cached) to another block table."""
        self.ref_counts[physical] += 1
        self.trace.emit("block_shared", physical=physical, request_id=request_id, logical=logical,
                        ref_count=self.ref_counts[physical])

    def release(self, physical: int, request_id: str, logical: int) -> None:
        count = self.ref_counts[physical] - 1
        assert count >= 0, f"block {physical} released more often than referenced"
        self.ref_counts[physical] = count
        self.trace.emit("block_released", physical=physical, request_id=request_id, logical=logical,
                        ref_count=count)
        if count == 0 and not (self.cache is not None and self.cache.keep_on_release(physical)):
            self.free.append(physical)
            self.trace.emit("block_freed", physical=physical)

    def needs_copy(self, physical: int) -> bool:
        """Writing into this block would change what another table or the prefix cache holds."""
        return self.ref_counts[physical] > 1 or (self.cache is not None and self.cache.holds(physical))

    def copy_on_write(self, table: list[int], logical: int, request_id: str, num_tokens: int) -> int:
        """Give `request_id` its own copy of a shared block before it writes into it; returns the block to use."""
        src = table[logical]
        if not self.needs_copy(src):
            return src
        dst = self.allocate(request_id, logical)
        if self.on_copy is not None:
            self.on_copy(src, dst, num_tokens)
        self.trace.emit("block_copied", src=src, dst=dst, request_id=request_id, logical=logical,
                        num_tokens=num_tokens)
        table[logical] = dst
        self.release(src, request_id, logical)
        return dst

    def release_table(self, table: list[int], request_id: str, start_logical: int = 0) -> None:
        """Drop a table's references from `start_logical` on, last block first (so tails are evicted first)."""
        for logical in range(len(table) - 1, start_logical - 1, -1):
            self.release(table[logical], request_id, logical)
        del table[start_logical:]


def tail_waste(table: list[int], num_tokens: int, block_size: int) -> int:
    """Slots reserved but unused in the last block of a table holding `num_tokens` tokens."""
    return len(table) * block_size - num_tokens
