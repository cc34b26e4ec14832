"""`kvtui bench prefix`: shared-prefix workloads with the prefix cache on against off, in the same run.

Each repeat replays the workload (arrival steps as written) on a fresh engine with the cache on, then on a fresh
one with it off (fresh: a cache warmed by the previous repeat would turn cold requests into hits). Reported:
throughput (generated tokens / wall seconds, the whole replay) and TTFT p50 / p95 over the requests, medians
over repeats; the ratio is the median of per-repeat throughput ratios.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from engine.trace.metrics import percentile
from engine.workload import load_workload, run_workload

DEFAULT_WORKLOADS = (
    "fixtures/workloads/shared_system_8users.json",
    "fixtures/workloads/agents_shared_background.json",
)


@dataclass
class PrefixRun:
    seconds: float
    tokens: int
    ttfts: list[float]
    cached_tokens: int

    @property
    def throughput(self) -> float:
        return self.tokens / self.seconds


@dataclass
class PrefixResult:
    workload: str
    requests: int
    on: list[PrefixRun] = field(default_factory=list)
    off: list[PrefixRun] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return statistics.median(a.throughput / b.throughput for a, b in zip(self.on, self.off))


def _replay(model, tokenizer, workload, config) -> PrefixRun:
    from engine.engine import Engine

    engine = Engine.from_model(model, tokenizer, config)
    start = time.perf_counter()
    outputs = run_workload(engine, workload)
    seconds = time.perf_counter() - start
    return PrefixRun(
        seconds,
        sum(len(o.token_ids) for o in outputs),
        [o.ttft for o in outputs if o.ttft is not None],
        sum(o.cached_tokens for o in outputs),
    )


def run_prefix(
    engine, paths=DEFAULT_WORKLOADS, repeats: int = 3, progress: Callable[[str], None] = lambda msg: None
) -> list[PrefixResult]:
    """`engine` lends its model, tokenizer and options; the workload's engine section sizes the pool."""
    from dataclasses import replace

    results = []
    for path in paths:
        workload = load_workload(path)
        base = replace(engine.config, **{k: v for k, v in workload.engine.items() if k != "prefix_cache"})
        result = PrefixResult(Path(path).stem, len(workload.requests))
        # warm up kernels
        _replay(engine.model, engine.tokenizer, workload, replace(base, prefix_cache=True))
        for r in range(repeats):
            progress(f"{result.workload}: repeat {r + 1}/{repeats}, cache on then off")
            result.on.append(
                _replay(engine.model, engine.tokenizer, workload, replace(base, prefix_cache=True))
            )
            result.off.append(
                _replay(engine.model, engine.tokenizer, workload, replace(base, prefix_cache=False))
            )
        results.append(result)
    return results


def format_prefix(results: list[PrefixResult]) -> str:
    lines = [
        f"{'workload':<28} {'cache':<5} {'tok/s':>8} {'TTFT p50 ms':>12} {'TTFT p95 ms':>12} {'cached tok':>10}"
    ]
    for res in results:
        for label, runs in (("on", res.on), ("off", res.off)):
            tput = statistics.median(r.throughput for r in runs)
            p50 = statistics.median(percentile(r.ttfts, 50) for r in runs) * 1000
            p95 = statistics.median(percentile(r.ttfts, 95) for r in runs) * 1000
            lines.append(
                f"{res.workload:<28} {label:<5} {tput:>8.1f} {p50:>12.1f} {p95:>12.1f} "
                f"{runs[0].cached_tokens:>10}"
            )
        spread = [a.throughput / b.throughput for a, b in zip(res.on, res.off)]
        lines.append(
            f"{'':<28} on / off throughput {res.ratio:.2f}x (repeats {min(spread):.2f}-{max(spread):.2f}), "
            f"{res.requests} requests"
        )
    lines.append("target: throughput with the cache >= 2x without")
    return "\n".join(lines)
