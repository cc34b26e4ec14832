"""The one-pass curve from a sample of the blocks (SHARDS, Waldspurger et al., FAST'15): `--sample RATE`.

A block is kept when the 64-bit hash of its whole prefix (block_table.prefix_hashes, salted by `--seed`) falls
below RATE x 2**64, so every reference of a kept block is kept, and the sampled stream is itself a prefix
workload: a request's kept blocks in depth order, each kept block's prefix kept in part. The one pass runs on
it unchanged (stack_pass.py), with the prefix rule intact: tail-first recency, only full prompt blocks, and
a block may hit only within its request's limit (the last prompt token is computed), judged at its depth in
the whole request. A stack position p among kept blocks stands for p / RATE among all blocks, so the curve at
C blocks reads the sampled histogram at C x RATE.

Hits are scaled by the ratio of counted blocks (every reference that may hit, over the kept ones that may):
exact at RATE 1, and free of the sample's size wobble. The error estimate: the kept blocks fall into 8 groups
by other bits of their hash, each group's curve is an estimate on its own, and the standard error is their
spread / sqrt(8) (random groups). Memory: the kept distinct blocks only.
"""

from __future__ import annotations

import numpy as np

from kvtui.whatif.block_table import PrefixTable, prefix_hashes
from kvtui.whatif.curve_figures import Curve
from kvtui.whatif.stack_pass import compact

__all__ = ["Sampler", "GROUPS"]

GROUPS = 8


class Sampler:
    def __init__(self, rate: float, seed: int = 0):
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"sample rate {rate}: give a share above 0 and at most 1 (0.01 = 1%)")
        self.rate, self.seed, self.groups = rate, seed, GROUPS
        self.threshold = np.uint64(min(int(rate * 2.0**64), (1 << 64) - 1))
        # every reference and every reference that may hit, kept or not
        self.total_blocks = self.may_hit_blocks = 0

    def add(self, table: PrefixTable, builder, keys, starts, may_hit) -> None:
        """Keep the sampled blocks of a flat batch and pass them on to the builder."""
        self.total_blocks += len(keys)
        self.may_hit_blocks += int(np.count_nonzero(may_hit))
        hashes = prefix_hashes(keys, starts, self.seed)
        kept = hashes < self.threshold if self.rate < 1.0 else np.ones(len(keys), dtype=bool)
        kept_before = np.concatenate([[0], np.cumsum(kept)])
        kept_starts = kept_before[starts]
        chosen = hashes[kept]
        # a prefix hash names its block: no tree to build, parent -1 for all
        nodes = table.lookup_or_add(np.full(len(chosen), -1, dtype=np.int64), chosen.view(np.int64))
        group = (chosen & np.uint64(GROUPS - 1)).astype(np.int64)
        builder.add_batch(nodes, kept_starts, may_hit[kept], group=group)

    def curve(self, builder):
        """The estimated curve, with its standard error at every point."""
        live = builder.live
        counted = builder.counted
        scale = self.may_hit_blocks / counted.sum() if counted.sum() else 0.0
        block_cum = np.rint(np.cumsum(builder.hist[:, : live + 1].sum(axis=0)) * scale).astype(np.int64)
        # each group's own estimate, summed and squared a group at a time (three arrays, not eight)
        usable = [g for g in range(self.groups) if counted[g]]
        total, squares = np.zeros(live + 1), np.zeros(live + 1)
        for g in usable:
            estimate = np.cumsum(builder.hist[g, : live + 1]) * (self.may_hit_blocks / counted[g])
            total += estimate
            squares += estimate * estimate
        n = len(usable)
        if n >= 2:
            spread = np.maximum(squares - total * total / n, 0.0) / (n - 1)
            error = np.sqrt(spread / n)
        else:
            error = np.zeros(live + 1)
        return Curve(
            block_cum=compact(block_cum),
            token_cum=None,
            total_blocks=self.total_blocks,
            total_tokens=self.total_blocks * builder.block_tokens,
            requests=builder.requests,
            measure_from=0,
            distinct_blocks=int(round(live / self.rate)),
            warm_blocks=0,
            block_tokens=builder.block_tokens,
            rate=self.rate,
            error_cum=compact(error, "d"),
        )
