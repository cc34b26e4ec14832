"""The one-pass curve from a sample of the blocks (SHARDS, Waldspurger et al., FAST'15): `--sample RATE`.

A block is kept when the 64-bit hash of its whole prefix (block_table.prefix_hashes, salted by `--seed`) falls
below RATE x 2**64, so every reference of a kept block is kept, and the sampled stream is itself a prefix
workload: a request's kept blocks in depth order, each kept block's prefix kept in part. The one pass runs on
it unchanged (stack_pass.py), with the prefix rule intact: tail-first recency, only full prompt blocks, and
a block may hit only within its request's limit (the last prompt token is computed), judged at its depth in
the whole request.

Plain SHARDS is far off on prefix workloads: a system prompt's block that every request starts with is a
few percent of all references, and it is in the sample or not (+21/-13 points at 10%, +58/-20 at 1%, on
synth.py's workload). So a first pass (`count`) finds the blocks referenced at least HEAVY / RATE times
(heavy_blocks.py, from a share of the requests), and the second keeps those whole: they count once each,
exactly, and stand for one block in the stack, while a sampled block stands for 1 / RATE blocks (stack
weights in fixed point, stack_pass.py). Without the first pass it is plain SHARDS. Sampled hits are scaled by
the ratio of counted blocks (every reference outside the heavy blocks that may hit, over the kept ones that
may): exact at RATE 1, and free of the sample's size wobble. The histogram keeps every capacity up to
FINE / RATE blocks and one in 1 / RATE above (curve_figures.sampled_index), so the positions that the heavy
blocks resolve finely (a system prompt at 3 blocks) are not rounded to 1 / RATE.

Below FINE / rate blocks the sampled curve is not used at all: the first part of a pass also keeps the top of
the stack exactly from every reference (top_stack.py, in memory bounded by that capacity), and the curve is
exact there and the sampled one's rise above it. A sampled block stands for 1 / rate blocks, so under about
10 / rate blocks a position is a handful of sampled blocks deep and was points off.

The error estimate: the sampled blocks fall into 8 groups by other bits of their hash, each group's curve
(plus the heavy blocks') is an estimate on its own, and the standard error is their spread / sqrt(8).
Memory: the kept distinct blocks, and the first pass's sketch.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from kvtui.whatif.block_table import PrefixTable, mix64, prefix_hashes
from kvtui.whatif.curve_figures import Curve, sampled_index
from kvtui.whatif.heavy_blocks import HeavyBlocks
from kvtui.whatif.stack_pass import compact
from kvtui.whatif.top_stack import ExactTop, available

__all__ = ["Sampler", "SampleFigures", "merged_curve", "GROUPS", "HEAVY"]

GROUPS = 8
# a block referenced HEAVY / rate times is kept whole: at most as many as the sample keeps
HEAVY = 1.0
# the first pass counts enough requests to see a heavy block about this many times
SEEN = 16.0
# fraction bits of the stack weights (a block is 2**SHIFT; 10**12 distinct blocks fit in 64 bits)
SHIFT = 16
# capacities up to FINE / rate blocks (at most FINE_MOST) are each kept; above, one in 1 / rate
FINE, FINE_MOST = 256, 1 << 21
_REQUEST_SALT = np.uint64(0xA0761D6478BD642F)


@dataclass
class SampleFigures:
    """What a sampled pass, or one hash range of it (sample_ranges.py), hands back: a few arrays, no blocks."""

    # hist[g, i]: hits at histogram place i of sampled group g (GROUPS: the heavy blocks)
    hist: np.ndarray
    # per group: the kept references that may hit
    counted: np.ndarray
    total_blocks: int
    may_hit_blocks: int
    may_hit_heavy: int
    heavy_refs: int
    # the distinct blocks this pass estimates, and those it kept
    live_blocks: int
    kept_blocks: int
    requests: int
    block_tokens: int
    # top[p]: the references that may hit at exact stack position p (1..FINE / rate), or None (not kept)
    top: np.ndarray | None = None


class Sampler:
    """`part` of `parts`: keep only that share of the sampled hash range (sample_ranges.py); the heavy
    blocks are kept in every part."""

    def __init__(self, rate: float, seed: int = 0, part: int = 0, parts: int = 1):
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"sample rate {rate}: give a share above 0 and at most 1 (0.01 = 1%)")
        if not 0 <= part < parts:
            raise ValueError(f"hash range {part} of {parts}: give 0 <= part < parts")
        self.rate, self.seed, self.groups = rate, seed, GROUPS
        self.part, self.parts = part, parts
        cut = min(int(rate * 2.0**64), (1 << 64) - 1)
        self.threshold = np.uint64(cut)
        self.low, self.high = np.uint64(cut * part // parts), np.uint64(cut * (part + 1) // parts)
        if part == parts - 1:
            self.high = self.threshold
        threshold = HEAVY / rate
        # references that make a block heavy (what the report says)
        self.heavy_threshold = threshold
        # the first pass's share of the requests, and the count that makes a block heavy in it
        self.count_share = min(1.0, SEEN / threshold)
        self.heavy = HeavyBlocks(threshold * self.count_share, 0)
        self._request_cut = np.uint64(min(int(self.count_share * 2.0**64), (1 << 64) - 1))
        self.counted_requests = 0
        # every reference and every reference that may hit, kept or not; those of heavy blocks
        self.total_blocks = self.may_hit_blocks = self.may_hit_heavy = self.heavy_refs = 0
        # the exact top of the stack: once, in the first part, where a C compiler is at hand
        self.top = ExactTop(self.fine) if not self.whole and part == 0 and available() else None

    @property
    def whole(self) -> bool:
        """Every block is kept (rate 1): the exact curve."""
        return self.rate >= 1.0

    def begin_count(self, expected_references: int) -> None:
        """Size the first pass's sketch for about this many block references."""
        self.heavy = HeavyBlocks(self.heavy.threshold, int(expected_references * self.count_share))

    def count(self, keys: np.ndarray, starts: np.ndarray) -> None:
        """The first pass: a flat batch of requests, a share of them counted (by a hash of their index)."""
        n = len(starts) - 1
        if self.whole or not n:
            return
        index = np.arange(self.counted_requests, self.counted_requests + n, dtype=np.uint64)
        self.counted_requests += n
        chosen = mix64(index ^ _REQUEST_SALT) < self._request_cut
        lengths = np.diff(starts)[chosen]
        if not lengths.sum():
            return
        picked = np.repeat(chosen, np.diff(starts))
        picked_starts = np.concatenate([[0], np.cumsum(lengths)])
        self.heavy.add(prefix_hashes(keys[picked], picked_starts, self.seed))

    def add(self, table: PrefixTable, builder, keys, starts, may_hit) -> None:
        """The second pass: keep the heavy and the sampled blocks of a flat batch, pass them to the builder."""
        self.total_blocks += len(keys)
        self.may_hit_blocks += int(np.count_nonzero(may_hit))
        if self.whole:
            nodes = table.intern(keys, starts)
            builder.add_batch(nodes, starts, may_hit, group=np.zeros(len(keys), dtype=np.int64))
            return
        hashes = prefix_hashes(keys, starts, self.seed)
        if self.top is not None:
            self.top.add(hashes, starts, may_hit)
        heavy = self.heavy.of(hashes)
        self.heavy_refs += int(np.count_nonzero(heavy))
        self.may_hit_heavy += int(np.count_nonzero(heavy & may_hit))
        kept = heavy | ((hashes >= self.low) & (hashes < self.high))
        kept_before = np.concatenate([[0], np.cumsum(kept)])
        chosen, chosen_heavy = hashes[kept], heavy[kept]
        # a prefix hash names its block: no tree to build, parent -1 for all
        nodes = table.lookup_or_add(np.full(len(chosen), -1, dtype=np.int64), chosen.view(np.int64))
        group = np.where(chosen_heavy, GROUPS, (chosen & np.uint64(GROUPS - 1)).astype(np.int64))
        # a heavy block stands for itself, a sampled one for 1 / rate blocks
        weights = np.where(chosen_heavy, 1 << SHIFT, round((1 << SHIFT) * self.parts / self.rate))
        builder.add_batch(nodes, kept_before[starts], may_hit[kept], group=group, stack_weights=weights)

    def builder_groups(self) -> int:
        """The histograms the builder keeps: one when every block is kept, else 8 sampled groups and heavy."""
        return 1 if self.whole else GROUPS + 1

    def builder_shift(self) -> int:
        return 0 if self.whole else SHIFT

    @property
    def exact_blocks(self) -> int:
        """Capacities up to this many blocks are exact (the top of the stack), 0: none."""
        return self.fine if self.top is not None else 0

    @property
    def fine(self) -> int:
        return min(int(FINE / self.rate), FINE_MOST)

    def builder_index(self):
        """The histogram's place of a stack position (curve_figures.sampled_index; None: itself)."""
        return None if self.whole else partial(sampled_index, rate=self.rate, fine=self.fine)

    def figures(self, builder, kept_blocks: int = 0) -> SampleFigures:
        """The pass's figures; the histograms are the builder's own (a view: add nothing after)."""
        top = builder.top
        return SampleFigures(
            hist=builder.hist[:, : top + 2],
            counted=builder.counted,
            total_blocks=self.total_blocks,
            may_hit_blocks=self.may_hit_blocks,
            may_hit_heavy=self.may_hit_heavy,
            heavy_refs=self.heavy_refs,
            live_blocks=builder.live >> builder.shift,
            kept_blocks=kept_blocks,
            requests=builder.requests,
            block_tokens=builder.block_tokens,
            top=None if self.top is None else self.top.hist,
        )

    def curve(self, builder) -> Curve:
        """The estimated curve, with its standard error at every point."""
        if self.whole:
            exact = builder.curve()
            error = compact(np.zeros(len(exact.block_cum)), "d")
            return Curve(**{**exact.__dict__, "error_cum": error})
        return merged_curve([self.figures(builder)], self.rate, self.fine)


def merged_curve(parts: list[SampleFigures], rate: float, fine: int) -> Curve:
    """The curve of one sampled pass, or of every hash range of one (each saw every reference and kept the
    heavy blocks, so those count once: their mean)."""
    top = next((p.top for p in parts if p.top is not None), None)
    # the exact top reaches as deep as its deepest hit, even past the sample's estimate of the live blocks
    reach = int(np.flatnonzero(top)[-1]) + 1 if top is not None and top.any() else 0
    width = max(reach, *(p.hist.shape[1] for p in parts))
    # a row at a time: one pass's histograms are used in place, and no float copy of all nine is made
    if len(parts) == 1 and parts[0].hist.shape[1] == width:
        hist = parts[0].hist
    else:
        hist = np.zeros((GROUPS + 1, width), dtype=np.int64)
        for p in parts:
            hist[:, : p.hist.shape[1]] += p.hist
    counted = np.sum([p.counted for p in parts], axis=0)
    first = parts[0]
    sampled_may_hit = first.may_hit_blocks - first.may_hit_heavy
    heavy_cum = np.cumsum(hist[GROUPS], dtype=np.float64) / len(parts)
    sampled_counted = counted[:GROUPS].sum()
    scale = sampled_may_hit / sampled_counted if sampled_counted else 0.0
    sampled_hits = np.zeros(width, dtype=np.int64)
    for g in range(GROUPS):
        sampled_hits += hist[g]
    estimate = heavy_cum + np.cumsum(sampled_hits) * scale
    del sampled_hits
    # exact up to the top's last place, then the sampled curve's rise above it
    exact = 0 if top is None else min(len(top), width) - 1
    if top is not None:
        exact_cum = np.cumsum(top[: exact + 1])
        estimate[exact + 1 :] += exact_cum[exact] - estimate[exact]
        estimate[: exact + 1] = exact_cum
    block_cum = np.rint(estimate).astype(np.int64)
    del estimate
    # each group's own estimate of the rise above the exact top, summed and squared a group at a time
    usable = [g for g in range(GROUPS) if counted[g]]
    total, squares = np.zeros(width), np.zeros(width)
    for g in usable:
        rise = heavy_cum + np.cumsum(hist[g]) * (sampled_may_hit / counted[g])
        rise -= rise[exact] if top is not None else 0.0
        total += rise
        squares += rise * rise
    n = len(usable)
    error = np.zeros(width)
    if n >= 2:
        spread = np.maximum(squares - total * total / n, 0.0) / (n - 1)
        error = np.sqrt(spread / n)
        error[: exact + 1] = 0.0
    return Curve(
        block_cum=compact(block_cum),
        token_cum=None,
        total_blocks=first.total_blocks,
        total_tokens=first.total_blocks * first.block_tokens,
        requests=first.requests,
        measure_from=0,
        distinct_blocks=round(sum(p.live_blocks for p in parts) / len(parts)),
        warm_blocks=0,
        block_tokens=first.block_tokens,
        rate=rate,
        error_cum=compact(error, "d"),
        fine=fine,
    )
