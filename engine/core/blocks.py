"""The physical block pool: fixed-size blocks, a free list, ref counts, and the events that describe them.

A block holds the K/V of `block_size` consecutive positions of one sequence (in every full-attention layer;
the tensors live in the worker, engine/worker/paged_kv.py). The pool only does bookkeeping: which blocks are
free and who references each block. It decides nothing about caching: when the last reference goes, the
KV-cache manager (engine/core/kv_cache.py) asks its prefix cache whether to keep the block as *cached*
(evictable) or to `free` it, and it evicts before allocating when the free list is empty. Every change is
emitted as a trace event so a replay can rebuild the pool.

Block states: free (on the free list), used (ref count >= 1), cached (ref count 0, kept by the prefix cache,
reclaimable on demand).

Copies. A copy-on-write is a fact of the pool (`block_copied`) and data for the worker: `copy` appends a
`BlockCopy` to `pending_copies`, and the runner copies those K/V slots, in order, before its next forward.
Nothing writes K/V between two forwards, so applying them late equals applying them at once. Moves between the
device and the lower tiers (engine/core/tiers.py) go on the same list, so every copy reads what the ones before
it left.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from engine.trace.writer import TraceSink


class OutOfBlocks(RuntimeError):
    """No free block and nothing evictable: the scheduler waits or preempts."""


@dataclass(frozen=True)
class BlockCopy:
    """Copy the first `num_tokens` slots of block `src` into block `dst` (every paged layer). Within the device
    pool (copy-on-write), or between tiers (engine/core/tiers.py): a block demoted to host, loaded back."""

    src: int
    dst: int
    num_tokens: int
    src_tier: str = "device"
    dst_tier: str = "device"


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int, trace: TraceSink):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"the pool needs at least one block of one token (got {num_blocks} x {block_size})"
            )
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.trace = trace
        self.ref_counts = [0] * num_blocks
        # bumped when a held block gains or loses a reference (allocation takes a free block, never a cached
        # one): the prefix tree's count of evictable blocks is kept until it changes (engine/core/eviction.py)
        self.changes = 0
        self.free: deque[int] = deque(range(num_blocks))
        # copies decided since the worker last took them (engine/worker/runner.py applies them in order)
        self.pending_copies: list[BlockCopy] = []

    # --- capacity -------------------------------------------------------------------------------------
    def num_free(self) -> int:
        return len(self.free)

    def num_used(self) -> int:
        return sum(1 for count in self.ref_counts if count > 0)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # --- references -----------------------------------------------------------------------------------
    def allocate(self, request_id: str, logical: int, group: int | None = None) -> int:
        """The first free block, for `request_id`'s logical block; OutOfBlocks when none is free (the manager
        evicts first). `group`: the KV-cache group whose table takes it (window_layout="paged"), named in the
        event; every method below takes it too."""
        if not self.free:
            raise OutOfBlocks(f"no free block for {request_id} (pool of {self.num_blocks} blocks is full)")
        physical = self.free.popleft()
        assert self.ref_counts[physical] == 0, f"free block {physical} has references"
        self.ref_counts[physical] = 1
        self.trace.emit(
            "block_allocated", physical=physical, request_id=request_id, logical=logical, **_named(group)
        )
        return physical

    def share(self, physical: int, request_id: str, logical: int, group: int | None = None) -> None:
        """Add an existing block (used or cached) to another block table."""
        self.ref_counts[physical] += 1
        self.changes += 1
        self.trace.emit(
            "block_shared",
            physical=physical,
            request_id=request_id,
            logical=logical,
            ref_count=self.ref_counts[physical],
            **_named(group),
        )

    def release(self, physical: int, request_id: str, logical: int, group: int | None = None) -> int:
        """Drop one reference; returns the references left (at 0 the caller caches or frees the block)."""
        count = self.ref_counts[physical] - 1
        assert count >= 0, f"block {physical} released more often than referenced"
        self.ref_counts[physical] = count
        self.changes += 1
        self.trace.emit(
            "block_released",
            physical=physical,
            request_id=request_id,
            logical=logical,
            ref_count=count,
            **_named(group),
        )
        return count

    def free_block(self, physical: int, group: int | None = None) -> None:
        """An unreferenced block nobody caches goes back on the free list."""
        assert self.ref_counts[physical] == 0, f"block {physical} is freed while referenced"
        self.free.append(physical)
        self.trace.emit("block_freed", physical=physical, **_named(group))

    def copy(
        self, src: int, dst: int, request_id: str, logical: int, num_tokens: int, group: int | None = None
    ) -> None:
        """Record that `dst` gets the first `num_tokens` slots of `src` (a copy-on-write) for the worker."""
        self.pending_copies.append(BlockCopy(src, dst, num_tokens))
        self.trace.emit(
            "block_copied",
            src=src,
            dst=dst,
            request_id=request_id,
            logical=logical,
            num_tokens=num_tokens,
            **_named(group),
        )

    def take_copies(self) -> list[BlockCopy]:
        """The copies decided since the last call, in order; the worker applies them before its next forward."""
        copies, self.pending_copies = self.pending_copies, []
        return copies


def _named(group: int | None) -> dict:
    """The `group` field of a block event: only where a group is named (window_layout="paged")."""
    return {} if group is None else {"group": group}


def tail_waste(table: list[int], num_tokens: int, block_size: int) -> int:
    """Slots reserved but unused in the last block of a table holding `num_tokens` tokens."""
    return len(table) * block_size - num_tokens
