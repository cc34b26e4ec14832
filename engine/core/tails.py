"""Partly filled last blocks of finished sequences, kept in the cache like whole tree blocks.

The radix tree holds whole blocks only. Without this store a finished request's last, partly filled block
would be freed, and the next chat turn (or an edit of that request) would recompute up to block_size - 1
tokens it had already computed. A tail is keyed by the key of the whole block before it (or by the root and
salt at position 0) and holds the token ids it covers; a request whose prompt continues that path reuses the
tail's first c tokens that equal its own. Tails are never written again: a request that continues one copies
it first (the pool's copy-on-write asks `holds`). Unreferenced tails are the first thing evicted: each one
costs fewer than block_size tokens to recompute.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.core.blocks import BlockPool
from engine.core.miss_explainer import common_prefix
from engine.trace import TraceSink


@dataclass
class Tail:
    physical: int
    parent_key: str
    parent_node_id: int
    token_ids: list[int]
    last_access: float


class TailStore:
    def __init__(self, pool: BlockPool, trace: TraceSink, clock: Callable[[], float]):
        self.pool = pool
        self.trace = trace
        self.clock = clock
        self.by_parent: dict[str, list[Tail]] = {}
        self.of: dict[int, Tail] = {}

    def holds(self, physical: int) -> bool:
        return physical in self.of

    def add(self, parent_key: str, parent_node_id: int, physical: int, token_ids: list[int]) -> bool:
        """Keep `physical` as the tail after `parent_key`; False when an equal or longer tail is there already."""
        siblings = self.by_parent.setdefault(parent_key, [])
        if any(common_prefix(t.token_ids, token_ids) == len(token_ids) for t in siblings):
            return False
        tail = Tail(physical, parent_key, parent_node_id, list(token_ids), self.clock())
        siblings.append(tail)
        self.of[physical] = tail
        return True

    def after(self, parent_key: str) -> list[tuple[int, list[int]]]:
        """The tails after `parent_key` as (parent node id, token ids): continuations for the miss explainer."""
        return [(t.parent_node_id, t.token_ids) for t in self.by_parent.get(parent_key, ())]

    def best(self, parent_key: str, rest: Sequence[int], limit: int) -> tuple[Tail, int] | None:
        """The tail after `parent_key` sharing the most leading tokens with `rest` (at most `limit`)."""
        found = None
        for tail in self.by_parent.get(parent_key, ()):
            same = min(common_prefix(tail.token_ids, rest), limit)
            if same > 0 and (found is None or same > found[1]):
                found = (tail, same)
        if found is not None:
            found[0].last_access = self.clock()
        return found

    def keep_on_release(self, physical: int) -> bool:
        tail = self.of.get(physical)
        if tail is None:
            return False
        self.trace.emit("block_cached", physical=physical, hash=f"tail:{tail.parent_key[:12]}")
        return True

    def evictable(self) -> list[Tail]:
        return [t for t in self.of.values() if self.pool.ref_counts[t.physical] == 0]

    def evict_one(self, policy: str) -> int | None:
        candidates = self.evictable()
        if not candidates:
            return None
        tail = min(candidates, key=lambda t: t.last_access)
        self.by_parent[tail.parent_key].remove(tail)
        if not self.by_parent[tail.parent_key]:
            del self.by_parent[tail.parent_key]
        del self.of[tail.physical]
        self.trace.emit(
            "block_evicted",
            physical=tail.physical,
            hash=f"tail:{tail.parent_key[:12]}",
            policy=policy,
            node_id=tail.parent_node_id,
        )
        return tail.physical
