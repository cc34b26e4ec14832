"""The whole LRU hit-rate curve of a prefix cache in one pass (Mattson stack distances).

    curve = lru_curve(requests)               # requests: each the sequence of its block keys, arrival order
    curve.hits(4096)                          # hit blocks with a cache of 4096 blocks
    curve.at([1024, 4096, 16384])             # the same at several capacities
    curve.hit_rate(4096)                      # hit tokens / prompt tokens (blocks when no weights are given)

Signature: `lru_curve(requests, *, matchable=None, weights=None, measure_from=0) -> Curve`; `CurveBuilder`
(stack_pass.py) takes the requests a batch at a time (a streamed workload) as prefix-tree node ids
(block_table.py). `Curve.hits(c)`, `Curve.hit_tokens(c)`, `Curve.hit_rate(c)`,
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
...` and one tree query serves the whole run. The cost is O(blocks + runs * log(requests)): numpy over the
blocks of a batch, plain Python over the runs only (stack_pass.py). The tree
doubles as requests come (a streamed workload has no count up front): the new top node covers every slot so
far, so it starts at the number of live blocks and the others at 0.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from kvtui.whatif.block_table import PrefixTable, depths_of
from kvtui.whatif.curve_figures import Curve
from kvtui.whatif.prefix_nodes import chain_nodes
from kvtui.whatif.stack_pass import CurveBuilder

__all__ = ["Curve", "CurveBuilder", "chain_nodes", "lru_curve", "simulate_lru", "LruPoint"]


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
    codes: dict = {}
    flat: list[int] = []
    starts = [0]
    for keys in requests:
        flat.extend(codes.setdefault(key, len(codes)) for key in keys)
        starts.append(len(flat))
    keys_array = np.array(flat, dtype=np.int64)
    starts_array = np.array(starts, dtype=np.int64)
    counts = np.diff(starts_array)
    limits = counts if matchable is None else np.minimum(counts, np.asarray(matchable[: len(counts)]))
    depth = depths_of(starts_array, len(flat))
    may_hit = depth < np.repeat(limits, counts)
    table = PrefixTable()
    builder = CurveBuilder(measure_from, weighted=weights is not None)
    block_weights = (
        np.array([w for ws in weights for w in ws], dtype=np.int64) if weights is not None else None
    )
    builder.add_batch(table.intern(keys_array, starts_array), starts_array, may_hit, block_weights)
    return builder.curve(len(table))


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
