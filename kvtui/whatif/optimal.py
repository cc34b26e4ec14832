"""Belady's bound: the best any eviction policy could do, at the same capacities as the LRU curve.

    points = belady(requests, [1024, 4096])   # one OptimalPoint per capacity
    points[0].hit_blocks, points[0].hit_tokens

Signature: `belady(requests, capacities, *, matchable=None, weights=None, measure_from=0) ->
list[OptimalPoint]`, with the same model and arguments as `kvtui.whatif.curve.lru_curve` (read its docstring:
arrival order, one request at a time, no pinning, block granular, prefix semantics, keys interned into a
prefix tree).

What exactly is computed: optimal offline eviction at block granularity. After each request the cache may keep
any set of at most C blocks taken from what it held and the request's blocks (nothing forces a block in: a
block that will never hit again is not kept). Belady's rule keeps the C blocks whose next *counted* use (the
next request from `measure_from` on that references the block within its `matchable` blocks) comes soonest,
ties broken by keeping the shallower block. This maximises hit blocks, prefix semantics included:
- every request that references a block also references its whole prefix, so a block's next use is never
  earlier than its parent's; with the tie rule the kept set is always closed under prefixes, and every cached
  block of a request's chain is part of a cached prefix, so Belady's block hits are all prefix hits;
- no policy gets more prefix hits than block hits, and Belady (with bypass) maximises block hits for a
  sequence of references, including references served a request at a time (the exchange argument is
  unchanged).
So `hit_blocks` is the exact optimum (the tests check it against trying every choice on tiny workloads), an
upper bound on any eviction policy under this model, LRU included, and at most the infinite-cache ceiling.
`hit_tokens` is the tokens of that block-optimal schedule; with unequal block weights (a short last block) a
schedule that favours heavy blocks could get a few more tokens, so the token figure is the block optimum's,
not a token optimum.

Cost: one simulation per capacity, a heap keyed by next use: O(references * log(capacity)) each (about 0.3 s
per capacity on a 300k-reference workload). `belady_flat` takes the chains as one flat array of node ids
with the start of each request (what a streamed workload keeps: 4 bytes a reference).
"""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from kvtui.whatif.prefix_nodes import PrefixNodes

__all__ = ["OptimalPoint", "belady", "belady_flat"]


@dataclass(frozen=True)
class OptimalPoint:
    capacity_blocks: int
    hit_blocks: int
    hit_tokens: int
    total_blocks: int
    total_tokens: int

    @property
    def hit_rate(self) -> float:
        """Hit tokens / counted tokens."""
        return self.hit_tokens / self.total_tokens if self.total_tokens else 0.0


def belady(
    requests: Sequence[Sequence[Hashable]],
    capacities: Sequence[int],
    *,
    matchable: Sequence[int] | None = None,
    weights: Sequence[Sequence[int]] | None = None,
    measure_from: int = 0,
) -> list[OptimalPoint]:
    """Belady's optimal eviction at each capacity (in blocks); one simulation per capacity."""
    interner = PrefixNodes()
    flat, starts = array("i"), array("q", [0])
    for keys in requests:
        flat.extend(interner.intern(keys))
        starts.append(len(flat))
    limits = [starts[i + 1] - starts[i] for i in range(len(requests))] if matchable is None else matchable
    return belady_flat(flat, starts, limits, len(interner), capacities, weights, measure_from)


def belady_flat(
    flat: Sequence[int],
    starts: Sequence[int],
    limits: Sequence[int],
    num_nodes: int,
    capacities: Sequence[int],
    weights: Sequence[Sequence[int]] | None = None,
    measure_from: int = 0,
    block_tokens: int = 1,
) -> list[OptimalPoint]:
    """The same over flat chains: request i's node ids are flat[starts[i]:starts[i + 1]], its first
    limits[i] blocks may hit; tokens per block from `weights` (per request) or `block_tokens` (all equal)."""
    uses = next_uses(flat, starts, limits, num_nodes, measure_from)
    return [
        _simulate(flat, starts, limits, uses, num_nodes, c, weights, measure_from, block_tokens)
        for c in capacities
    ]


def next_uses(
    flat: Sequence[int], starts: Sequence[int], limits: Sequence[int], num_nodes: int, measure_from: int = 0
) -> array:
    """For each reference (request i, depth d), flat like the chains: the next request after i where the
    node's hit would count (a request from `measure_from` on, the node within its limit); the number of
    requests when there is none."""
    requests = len(starts) - 1
    upcoming = array("i", [requests]) * num_nodes
    out = array("i", [0]) * len(flat)
    for index in range(requests - 1, -1, -1):
        start, end = starts[index], starts[index + 1]
        for p in range(start, end):
            out[p] = upcoming[flat[p]]
        if index < measure_from:
            continue
        for p in range(start, min(end, start + limits[index])):
            upcoming[flat[p]] = index
    return out


def _simulate(
    flat, starts, limits, uses, num_nodes: int, capacity: int, weights, measure_from: int, block_tokens: int
) -> OptimalPoint:
    never = len(starts) - 1
    present = bytearray(num_nodes)
    # the next counted use each cached node is kept for (a heap entry is stale unless it matches)
    keep_for = array("i", [never]) * num_nodes
    # a max-heap on (next use, depth): (-next, -depth, node)
    heap: list[tuple[int, int, int]] = []
    size = 0
    hit_blocks = hit_tokens = total_blocks = total_tokens = 0
    push, pop = heapq.heappush, heapq.heappop
    for index in range(never):
        start, end = starts[index], starts[index + 1]
        count = end - start
        block_weights = weights[index] if weights is not None else None
        if index >= measure_from:
            limit = min(count, limits[index])
            total_blocks += count
            total_tokens += sum(block_weights) if block_weights is not None else count * block_tokens
            depth = 0
            while depth < limit and present[flat[start + depth]]:
                depth += 1
            hit_blocks += depth
            hit_tokens += sum(block_weights[:depth]) if block_weights is not None else depth * block_tokens
        for p in range(start, end):
            node, upcoming = flat[p], uses[p]
            if upcoming == never:
                # never hits again: keeping it can only cost a slot
                if present[node]:
                    present[node] = 0
                    size -= 1
                continue
            keep_for[node] = upcoming
            if not present[node]:
                present[node] = 1
                size += 1
            push(heap, (-upcoming, start - p, node))
        while size > capacity:
            negative_next, _, node = pop(heap)
            if present[node] and keep_for[node] == -negative_next:
                present[node] = 0
                size -= 1
    return OptimalPoint(capacity, hit_blocks, hit_tokens, total_blocks, total_tokens)
