"""The sampled one-pass curve with its block space split into hash ranges, one task a range: on local cores
(`--sample RATE --jobs N`) or on a Ray cluster (`--sample RATE --ray ADDRESS --jobs N`).

    summary, passes = ranged_passes(spec, parts=2, ray_address="local")
    passes[512].curve()

Each task reads the file itself (the path must name the same file on every machine) and keeps its own range
of the sampled hashes, a SHARDS partition at RATE / N, plus every heavy block, which its own first pass finds
(the same sketch in every task: it is made from the same file and seed). It hands back a few arrays
(sampled.SampleFigures), never a request; the merged curve is their sum (sampled.merged_curve). The figures
depend on the rate, the seed and N, not on where the ranges run: N local processes and N Ray tasks give the
same curve. A range's stack distances count its own blocks only, so N ranges are N smaller samples averaged,
not one sample at RATE: N = 1 is the plain sampled pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtui.whatif.sampled import SampleFigures, merged_curve
from kvtui.whatif.stream import StreamedWorkload


@dataclass(frozen=True)
class RangeSpec:
    """What every task is told: the file and how to read and sample it (no requests)."""

    path: str
    fmt: str
    block_sizes: tuple[int, ...]
    trace_block_size: int
    rate: float
    seed: int
    parts: int
    start: int | None = None
    stop: int | None = None


@dataclass
class RangeResult:
    summary: StreamedWorkload
    # block size -> (figures, first arrival, last arrival)
    figures: dict


class SampleSummary:
    """What the report says of the sample (sweep.sampled_note): the fields it reads of a Sampler."""

    def __init__(
        self,
        rate: float,
        seed: int,
        heavy_refs: int,
        heavy_threshold: float,
        total_blocks: int,
        exact_blocks: int = 0,
    ):
        self.rate, self.seed, self.heavy_refs = rate, seed, heavy_refs
        self.heavy_threshold, self.total_blocks = heavy_threshold, total_blocks
        self.exact_blocks = exact_blocks


class MergedPass:
    """The ranges of one block size merged: what the sweep reads of a OnePass."""

    keep_chains = False

    def __init__(self, spec: RangeSpec, block_size: int, parts: list[SampleFigures], first, last):
        from kvtui.whatif.sampled import HEAVY, Sampler

        self.block_size = block_size
        fine = Sampler(spec.rate).fine
        self._curve = merged_curve(parts, spec.rate, fine)
        self.first_arrival, self.last_arrival = first, last
        head = parts[0]
        self.kept = sum(p.kept_blocks for p in parts)
        exact = fine if any(p.top is not None for p in parts) else 0
        self.sampler = SampleSummary(
            spec.rate, spec.seed, head.heavy_refs, HEAVY / spec.rate, head.total_blocks, exact
        )

    def curve(self):
        return self._curve

    @property
    def arrival_span(self) -> float:
        return 0.0 if self.first_arrival is None else self.last_arrival - self.first_arrival

    @property
    def distinct_blocks(self) -> int:
        """The distinct blocks the ranges kept (the heavy ones once in each)."""
        return self.kept

    @property
    def references(self) -> int:
        return self.sampler.total_blocks


def range_job(spec: RangeSpec, part: int) -> RangeResult:
    """One task: the file read twice (the heavy blocks, then the sample), range `part` of spec.parts kept."""
    from kvtui.whatif.stream import one_pass_file

    summary, ones = one_pass_file(
        spec.path,
        list(spec.block_sizes),
        spec.trace_block_size,
        spec.start,
        spec.stop,
        keep_chains=False,
        fmt=spec.fmt,
        sample=spec.rate,
        seed=spec.seed,
        part=part,
        parts=spec.parts,
    )
    figures = {
        bs: (one.sampler.figures(one.builder, len(one.table)), one.first_arrival, one.last_arrival)
        for bs, one in ones.items()
    }
    return RangeResult(summary, figures)


def ranged_passes(spec: RangeSpec, jobs: int = 1, ray_address: str | None = None, done=None):
    """Every range of spec.parts, `jobs` at a time here or on Ray: (the summary, {block size: MergedPass})."""
    from kvtui.whatif.jobs import run_jobs

    results = run_jobs(range_job, spec, list(range(spec.parts)), jobs, ray_address, done)
    passes = {}
    for bs in spec.block_sizes:
        parts = [r.figures[bs][0] for r in results]
        _, first, last = results[0].figures[bs]
        passes[bs] = MergedPass(spec, bs, parts, first, last)
    return results[0].summary, passes
