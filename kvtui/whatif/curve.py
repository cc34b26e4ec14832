"""The whole LRU hit-rate curve of a prefix cache in one pass (Mattson stack distances).

    curve = lru_curve(requests)               # requests: each the sequence of its block keys, arrival order
    curve.hits(4096)                          # hit blocks with a cache of 4096 blocks
    curve.at([1024, 4096, 16384])             # the same at several capacities
    curve.hit_rate(4096)                      # hit tokens / prompt tokens (blocks when no weights are given)

Signature: `lru_curve(requests, *, matchable=None, weights=None, measure_from=0) -> Curve`; `CurveBuilder`
takes the requests one at a time (a streamed workload) as prefix-tree node ids (prefix_nodes.py). `Curve.hits(c)`, `Curve.hit_tokens(c)`, `Curve.hit_rate(c)`,
`Curve.at(capacities)`, `Curve.total_blocks`, `Curve.total_tokens`, `Curve.ceiling_blocks`,
`Curve.distinct_blocks`, `Curve.warm_blocks`. `simulate_lru` is the plain simulation the curve must equal.

The model (its assumptions; where the engine breaks them, a full simulation differs):
- Requests are served one at a time, in arrival order. Each request references all its blocks at its arrival:
  its hits are judged against the cache as the previous requests left it, then its blocks are cached.
- No pinning: a running request's blocks never stay cached because they are in use; concurrency, chunked
  prefill and preemption do not exist here.
- Block granular: a block is cached whole or not at all; a request's key list names only blocks that get
  cached (leave a partial last block out, or count it with `matchable`).
- Prefix semantics: block j of a request hits only if blocks 0..j all hit. A key stands for its whole prefix:
  equal leading keys are a shared prefix, and the same key after a different prefix is a different block (the
  keys are interned into a prefix tree, so chained keys such as vLLM's block hashes or Mooncake's hash ids
  cost nothing extra, and unchained ones are still exact).
- LRU over blocks, and within a request the first block is the most recently used (a request's tail is
  evicted before its head, as vLLM frees a request's blocks in reverse order). So a block's prefix is always
  more recent than the block: an ancestor is never evicted before its descendants, and LRU over blocks is the
  same as LRU over the leaves of the prefix tree.
- `matchable[i]`: only the first matchable[i] blocks of request i may hit (e.g. the engine recomputes the last
  prompt token, or a partial block); the others are still referenced and cached.
- `measure_from`: requests before this index warm the cache up and are not counted (kvcache-simulator counts
  only the last 50% of requests).

Method: under LRU with capacity C a block is cached iff its position in the recency stack (1 = the most
recent) is at most C, for every C at once (LRU's inclusion property). Block j of a request hits at C iff the
largest stack position among blocks 0..j is at most C. One pass records, for every counted block, that running
maximum in a histogram; the hits at C are the histogram's sum up to C.

The stack positions come from a Fenwick tree over request slots, not over single references: blocks last
referenced by the same earlier request L form one contiguous run of the current request (the run's keys are
that request's blocks at the same depths), so a run's positions are `(blocks last referenced after L) + 1, +2,
...` and one tree query serves the whole run. The cost is O(blocks + runs * log(requests)); on a
Mooncake-sized workload (12k requests, 300k block references) well under a second of pure Python. The tree
doubles as requests come (a streamed workload has no count up front): the new top node covers every slot so
far, so it starts at the number of live blocks and the others at 0.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from kvtui.whatif.prefix_nodes import PrefixNodes, chain_nodes

__all__ = ["Curve", "CurveBuilder", "chain_nodes", "lru_curve", "simulate_lru", "LruPoint"]


@dataclass(frozen=True)
class Curve:
    """Hits at every LRU capacity. `block_cum[c]`: blocks that hit at capacity c (c up to `distinct_blocks`;
    beyond it nothing changes); `token_cum[c]` the same in tokens, or None when every block holds
    `block_tokens` tokens."""

    block_cum: list[int]
    token_cum: list[int] | None
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

    def _index(self, capacity_blocks) -> int:
        return max(0, min(int(capacity_blocks), len(self.block_cum) - 1))

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
        return low

    @property
    def ceiling_blocks(self) -> int:
        """Hit blocks with an infinite cache."""
        return self.block_cum[-1]

    @property
    def ceiling_tokens(self) -> int:
        return self.hit_tokens(len(self.block_cum))


class CurveBuilder:
    """The one pass, a request at a time: `add(nodes, limit)` in arrival order, then `curve()`.

    `nodes`: the request's prefix-tree node ids (PrefixNodes.intern); `limit`: how many leading blocks may hit;
    `block_weights`: tokens per block when they differ (give it for every request or for none);
    `block_tokens`: tokens per block when they are all equal."""

    def __init__(self, measure_from: int = 0, block_tokens: int = 1, weighted: bool = False):
        self.measure_from, self.block_tokens, self.weighted = measure_from, block_tokens, weighted
        # last[node]: the slot (request index + 1) that last referenced it; 0 = never
        self.last: list[int] = []
        # Fenwick tree over slots 1..len(tree)-1 (a power of two): blocks whose last reference is there
        self.tree = [0] * 1025
        # hist[p]: counted blocks whose running-max stack position is p (p = 1 is the most recent block)
        self.hist_blocks = [0] * 1026
        self.hist_tokens = [0] * 1026 if weighted else None
        self.live = self.requests = self.total_blocks = self.total_tokens = self.warm_blocks = 0

    def _grow_tree(self) -> None:
        size = len(self.tree) - 1
        self.tree.extend([0] * size)
        # the new top node covers every slot so far; the others cover only empty slots
        self.tree[2 * size] = self.live

    def add(self, nodes: Sequence[int], limit: int, block_weights: Sequence[int] | None = None) -> None:
        index = self.requests
        self.requests += 1
        slot = index + 1
        if slot >= len(self.tree):
            self._grow_tree()
        tree, last, live = self.tree, self.last, self.live
        size = len(tree) - 1
        count = len(nodes)
        # new nodes come last in a request, numbered up from len(last)
        if nodes and nodes[-1] >= len(last):
            last.extend([0] * (nodes[-1] + 1 - len(last)))
        counted = index >= self.measure_from
        if index == self.measure_from:
            self.warm_blocks = live
        limit = min(count, limit)
        if counted:
            self.total_blocks += count
            self.total_tokens += sum(block_weights) if self.weighted else count * self.block_tokens
        hist_blocks, hist_tokens = self.hist_blocks, self.hist_tokens
        # the seen prefix: runs of blocks that share their last slot, slots decreasing along the request
        depth = 0
        run_slot = -1
        base = 0
        run_start = 0
        runs: list[tuple[int, int]] = []
        while depth < count:
            seen = last[nodes[depth]]
            if seen == 0:
                break
            if seen != run_slot:
                if run_slot > 0:
                    runs.append((run_slot, depth - run_start))
                run_slot = seen
                run_start = depth
                # blocks last referenced after slot `seen`: live - prefix_sum(seen)
                prefix = 0
                i = seen
                while i:
                    prefix += tree[i]
                    i &= i - 1
                base = live - prefix - run_start
            if counted and depth < limit:
                # stack position = base + depth + 1; positions increase along the request, so this is also
                # the running maximum
                position = base + depth + 1
                hist_blocks[position] += 1
                if hist_tokens is not None:
                    hist_tokens[position] += block_weights[depth]
            depth += 1
        if run_slot > 0:
            runs.append((run_slot, depth - run_start))
        # the new blocks: everything from the first unseen one on (their descendants are new nodes too)
        live += count - depth
        self.live = live
        if live + 2 > len(hist_blocks):
            grow = max(live + 2 - len(hist_blocks), len(hist_blocks))
            hist_blocks.extend([0] * grow)
            if hist_tokens is not None:
                hist_tokens.extend([0] * grow)
        for old_slot, run in runs:
            i = old_slot
            while i <= size:
                tree[i] -= run
                i += i & -i
        i = slot
        while i <= size:
            tree[i] += count
            i += i & -i
        for node in nodes:
            last[node] = slot

    def curve(self, distinct_blocks: int | None = None) -> Curve:
        live = self.live
        warm = live if self.measure_from >= self.requests else self.warm_blocks
        block_cum = list(accumulate(self.hist_blocks[: live + 1]))
        token_cum = list(accumulate(self.hist_tokens[: live + 1])) if self.weighted else None
        return Curve(
            block_cum=block_cum,
            token_cum=token_cum,
            total_blocks=self.total_blocks,
            total_tokens=self.total_tokens,
            requests=self.requests,
            measure_from=self.measure_from,
            distinct_blocks=live if distinct_blocks is None else distinct_blocks,
            warm_blocks=warm,
            block_tokens=self.block_tokens,
        )


def lru_curve(
    requests: Sequence[Sequence[Hashable]],
    *,
    matchable: Sequence[int] | None = None,
    weights: Sequence[Sequence[int]] | None = None,
    measure_from: int = 0,
) -> Curve:
    """The LRU curve of `requests` (arrival order; each the sequence of its block keys) in one pass.

    `matchable`: per request, how many leading blocks may hit (default: all). `weights`: per request, the
    tokens of each block (default: 1 each, so tokens equal blocks). `measure_from`: the first request counted.
    """
    interner = PrefixNodes()
    builder = CurveBuilder(measure_from, weighted=weights is not None)
    for index, keys in enumerate(requests):
        nodes = interner.intern(keys)
        limit = len(nodes) if matchable is None else matchable[index]
        builder.add(nodes, limit, weights[index] if weights is not None else None)
    return builder.curve(len(interner))


@dataclass(frozen=True)
class LruPoint:
    capacity_blocks: int
    hit_blocks: int
    hit_tokens: int
    total_blocks: int
    total_tokens: int


def simulate_lru(
    requests: Sequence[Sequence[Hashable]],
    capacity_blocks: int,
    *,
    matchable: Sequence[int] | None = None,
    weights: Sequence[Sequence[int]] | None = None,
    measure_from: int = 0,
) -> LruPoint:
    """The plain simulation of the same model at one capacity (an OrderedDict, oldest first): the reference
    that `lru_curve` equals at every capacity."""
    chains, _ = chain_nodes(requests)
    cache: OrderedDict[int, None] = OrderedDict()
    hit_blocks = hit_tokens = total_blocks = total_tokens = 0
    for index, nodes in enumerate(chains):
        limit = len(nodes) if matchable is None else min(len(nodes), matchable[index])
        block_weights = weights[index] if weights is not None else [1] * len(nodes)
        if index >= measure_from:
            total_blocks += len(nodes)
            total_tokens += sum(block_weights)
            for depth in range(limit):
                if nodes[depth] not in cache:
                    break
                hit_blocks += 1
                hit_tokens += block_weights[depth]
        # the tail first, so the first block ends up the most recent
        for node in reversed(nodes):
            cache[node] = None
            cache.move_to_end(node)
            if len(cache) > capacity_blocks:
                cache.popitem(last=False)
    return LruPoint(capacity_blocks, hit_blocks, hit_tokens, total_blocks, total_tokens)
