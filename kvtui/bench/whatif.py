"""`kvtui bench whatif`: the one-pass LRU curve against kvcache-simulator's LRU sweep: same workload, one run.

The workload is the Mooncake-shaped one of kvtui.whatif.synth (12,031 requests, about 12k prompt tokens each,
512-token hash ids), written to a temporary file unless --workload names one. Both tools read that file:
- kvtui: parse the JSONL, `lru_curve` with kvcache-simulator's token weights (a block holds 512 tokens, the
  last one `input_length - (n-1)*512`) and its window (only the last 50% of requests are counted), then read
  the hits at the 50 capacities;
- kvcache-simulator (PyPI; its C++ backend): `kvcache-simulator run --policies lru` over the same capacities.
  It takes budgets in GiB, so the budgets are the capacities times the bytes of one 512-token block of
  llama-3.1-8b in bf16 (64 MiB: 32 layers x 8 KV heads x 128 x 2 x 2 bytes x 512), which it turns back into
  exactly those block counts; its JSON says the block count of every point, and the comparison uses it.
Each round runs both back to back (alternating which goes first); medians over rounds are reported, with the
load average, since on a busy machine the times mean little. Its C++ core is compiled before timing.

Where the definitions agree (capacities of at least the longest request, so that no request is larger than the
cache; kvcache-simulator's trie LRU evicts leaves, which equals LRU over blocks with a request's head the most
recent), the hit rates must be equal; the check reports the largest difference in points. kvcache- simulator
omits capacities that are not full when counting starts (and every larger one); the capacities are chosen up
to that size so that all 50 are compared.

Without kvcache-simulator (not on PATH and no --kvcache-simulator), the baseline is a plain LRU simulation per
capacity (kvtui.whatif.curve.simulate_lru, an OrderedDict), which the curve must equal exactly.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kvtui.whatif.curve import Curve, chain_nodes, lru_curve, simulate_lru
from kvtui.whatif.mooncake import load_mooncake
from kvtui.whatif.optimal import belady
from kvtui.whatif.synth import mooncake_like, write_jsonl

TRACE_BLOCK = 512
# llama-3.1-8b, bf16: 2 (K and V) x 32 layers x 8 KV heads x 128 dims x 2 bytes, per token
KVSIM_MODEL = "llama-3.1-8b"
KVSIM_BYTES_PER_BLOCK = 2 * 32 * 8 * 128 * 2 * TRACE_BLOCK
GIB = 1 << 30


@dataclass
class Workload:
    path: Path
    keys: list[list[int]]
    weights: list[list[int]]
    prompt_tokens: int


def read_mooncake(path: str | Path, block_size: int = TRACE_BLOCK) -> Workload:
    """A Mooncake JSONL through the what-if reader (kvtui/whatif/mooncake.py): per request its hash ids and the
    tokens of each block (the last one partial). A bad line stops the bench (both tools must read the same)."""
    loaded = load_mooncake(path, block_size)
    if loaded.problems:
        raise ValueError(f"{path}: {loaded.problems[0]}")
    keys, weights, prompt = [], [], 0
    for request in loaded.requests:
        ids, length = request.hash_ids, request.input_length
        keys.append(ids)
        # kvcache-simulator's weights: min(block, left), at least 1
        weights.append([max(1, min(block_size, length - i * block_size)) for i in range(len(ids))])
        prompt += length
    return Workload(Path(path), keys, weights, prompt)


def pick_capacities(workload: Workload, count: int, measure_from: int) -> list[int]:
    """`count` capacities, log-spaced from the longest request to the distinct blocks seen before counting
    starts (beyond it kvcache-simulator reports nothing)."""
    longest = max(len(k) for k in workload.keys)
    chains, _ = chain_nodes(workload.keys[:measure_from])
    warm = len({node for nodes in chains for node in nodes})
    low, high = math.log(longest), math.log(max(warm, longest + count))
    capacities: list[int] = []
    for i in range(count):
        value = round(math.exp(low + (high - low) * i / (count - 1)))
        capacities.append(max(value, capacities[-1] + 1) if capacities else value)
    return capacities


def one_pass(workload: Workload, capacities: list[int]) -> tuple[float, float, Curve, list[float]]:
    """Parse + curve + read-off, timed from the file (as kvcache-simulator is); also the curve alone."""
    start = time.perf_counter()
    loaded = read_mooncake(workload.path)
    measure_from = len(loaded.keys) // 2
    curve_start = time.perf_counter()
    curve = lru_curve(loaded.keys, weights=loaded.weights, measure_from=measure_from)
    rates = [curve.hit_rate(c) for c in capacities]
    end = time.perf_counter()
    return end - start, end - curve_start, curve, rates


def kvsim_command(exe: str, path: Path, capacities: list[int]) -> list[str]:
    budgets = ",".join(repr(c * KVSIM_BYTES_PER_BLOCK / GIB) for c in capacities)
    return [
        exe,
        "run",
        "--trace",
        str(path),
        "--block-size",
        str(TRACE_BLOCK),
        "--model",
        KVSIM_MODEL,
        "--kv-precision",
        "bf16_fp16",
        "--policies",
        "lru",
        "--budgets-gib",
        budgets,
        "--format",
        "json",
        "--no-progress",
    ]


def run_kvsim(exe: str, path: Path, capacities: list[int]) -> tuple[float, dict[int, float], dict]:
    """Its wall time (the whole command, as a user runs it) and its LRU hit rate per block capacity."""
    start = time.perf_counter()
    done = subprocess.run(kvsim_command(exe, path, capacities), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"kvcache-simulator failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    payload = json.loads(done.stdout)
    rates = {
        int(point["cacheBlocks"]): float(point["results"]["lru"]["hitRate"]) for point in payload["points"]
    }
    return seconds, rates, payload["metadata"]


def simulated_sweep(workload: Workload, capacities: list[int]) -> tuple[float, dict[int, float]]:
    """The fallback baseline: one OrderedDict LRU simulation per capacity, parsing included."""
    start = time.perf_counter()
    loaded = read_mooncake(workload.path)
    measure_from = len(loaded.keys) // 2
    rates = {}
    for capacity in capacities:
        point = simulate_lru(loaded.keys, capacity, weights=loaded.weights, measure_from=measure_from)
        rates[capacity] = point.hit_tokens / point.total_tokens
    return time.perf_counter() - start, rates


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f} (1, 5, 15 min) on {os.cpu_count()} CPUs"


@dataclass
class WhatifBenchResult:
    workload: Workload
    capacities: list[int]
    baseline: str
    ours: list[float] = field(default_factory=list)
    ours_curve_only: list[float] = field(default_factory=list)
    theirs: list[float] = field(default_factory=list)
    our_rates: list[float] = field(default_factory=list)
    their_rates: dict[int, float] = field(default_factory=dict)
    curve: Curve | None = None
    load_before: str = ""
    load_after: str = ""


def run(
    workload_path: str | None = None,
    capacities: int = 50,
    repeats: int = 3,
    kvsim: str | None = None,
    seed: int = 0,
    check: int = 5,
    optimal: bool = False,
    echo: Callable[[str], None] = print,
) -> WhatifBenchResult:
    exe = kvsim or shutil.which("kvcache-simulator")
    with tempfile.TemporaryDirectory(prefix="kvtui-bench-whatif-") as tmp:
        if workload_path is None:
            path = write_jsonl(mooncake_like(seed), Path(tmp) / "mooncake_like.jsonl")
            echo(f"workload: kvtui.whatif.synth, seed {seed} (written to a temporary file)")
        else:
            path = Path(workload_path)
            echo(f"workload: {path}")
        workload = read_mooncake(path)
        requests = len(workload.keys)
        measure_from = requests // 2
        echo(
            f"  {requests:,} requests, {workload.prompt_tokens / requests:,.0f} prompt tokens on average, "
            f"{sum(map(len, workload.keys)):,} block references; counted: requests {measure_from:,} on "
            f"(the last 50%)"
        )
        chosen = pick_capacities(workload, capacities, measure_from)
        result = WhatifBenchResult(workload, chosen, baseline="kvcache-simulator" if exe else "simulated")
        echo(
            f"  {len(chosen)} capacities, {chosen[0]:,} to {chosen[-1]:,} blocks "
            f"({chosen[0] * TRACE_BLOCK:,} to {chosen[-1] * TRACE_BLOCK:,} tokens)"
        )
        if exe:
            echo(f"baseline: {exe} (its C++ backend; compiling it first, untimed)")
            run_kvsim(exe, path, chosen[:1])
        else:
            echo(
                "baseline: kvcache-simulator not found (pip install kvcache-simulator, or give "
                "--kvcache-simulator PATH); measuring a plain OrderedDict LRU simulation per capacity instead"
            )
        result.load_before = load_average()
        for round_index in range(repeats):
            order = ("ours", "theirs") if round_index % 2 == 0 else ("theirs", "ours")
            for who in order:
                if who == "ours":
                    total, curve_only, curve, rates = one_pass(workload, chosen)
                    result.ours.append(total)
                    result.ours_curve_only.append(curve_only)
                    result.curve, result.our_rates = curve, rates
                elif exe:
                    seconds, their_rates, _ = run_kvsim(exe, path, chosen)
                    result.theirs.append(seconds)
                    result.their_rates = their_rates
                else:
                    seconds, their_rates = simulated_sweep(workload, chosen)
                    result.theirs.append(seconds)
                    result.their_rates = their_rates
            echo(
                f"  round {round_index + 1}: one-pass {result.ours[-1]:.2f} s, {result.baseline} "
                f"{result.theirs[-1]:.2f} s"
            )
        result.load_after = load_average()
        report(result, echo)
        if check:
            check_simulated(workload, result, check, echo)
        if optimal:
            report_optimal(workload, result, check or 5, echo)
    return result


def report(result: WhatifBenchResult, echo: Callable[[str], None]) -> None:
    ours, theirs = statistics.median(result.ours), statistics.median(result.theirs)
    echo("")
    echo(f"speed, {len(result.capacities)} LRU capacities, median of {len(result.ours)} rounds:")
    echo(f"  kvtui one-pass curve (parse + curve + read-off): {ours:8.3f} s")
    echo(
        f"    of which the curve and read-off alone:         "
        f"{statistics.median(result.ours_curve_only):8.3f} s"
    )
    echo(f"  {result.baseline:<47}: {theirs:8.3f} s")
    echo(f"  ratio: one-pass is {theirs / ours:.1f}x faster")
    echo(f"  load average before: {result.load_before}")
    echo(f"  load average after:  {result.load_after}")
    echo("")
    echo("hit rate (tokens, last 50% of requests):")
    echo(f"  {'blocks':>8} {'tokens':>12} {'one-pass':>9} {result.baseline:>17} {'diff (pts)':>10}")
    worst, compared = 0.0, 0
    for capacity, ours_rate in zip(result.capacities, result.our_rates):
        their_rate = result.their_rates.get(capacity)
        theirs_text, diff_text = "omitted", ""
        if their_rate is not None:
            diff = (ours_rate - their_rate) * 100
            worst, compared = max(worst, abs(diff)), compared + 1
            theirs_text, diff_text = f"{their_rate * 100:.3f}%", f"{diff:+.4f}"
        echo(
            f"  {capacity:>8,} {capacity * TRACE_BLOCK:>12,} {ours_rate * 100:>8.3f}% {theirs_text:>17} "
            f"{diff_text:>10}"
        )
    curve = result.curve
    if curve is not None:
        echo(
            f"  ceiling (infinite cache): {curve.hit_rate(curve.distinct_blocks) * 100:.3f}%; "
            f"{curve.distinct_blocks:,} distinct blocks, {curve.warm_blocks:,} of them before counting starts"
        )
    echo(
        f"agreement: {compared} of {len(result.capacities)} capacities compared, largest difference "
        f"{worst:.4f} points (target: within 0.1)"
    )


def check_simulated(
    workload: Workload, result: WhatifBenchResult, count: int, echo: Callable[[str], None]
) -> None:
    """The one-pass curve against plain simulations at `count` of the capacities (they must be equal)."""
    step = max(1, len(result.capacities) // count)
    picked = result.capacities[::step][:count]
    measure_from = len(workload.keys) // 2
    echo("")
    echo(f"one-pass vs a plain LRU simulation (OrderedDict), {len(picked)} capacities:")
    for capacity in picked:
        start = time.perf_counter()
        point = simulate_lru(workload.keys, capacity, weights=workload.weights, measure_from=measure_from)
        seconds = time.perf_counter() - start
        curve = result.curve
        same = (curve.hits(capacity), curve.hit_tokens(capacity)) == (point.hit_blocks, point.hit_tokens)
        echo(
            f"  {capacity:>8,} blocks: simulated {point.hit_tokens / point.total_tokens * 100:.3f}% "
            f"({seconds:.2f} s), one-pass {curve.hit_rate(capacity) * 100:.3f}%: "
            f"{'equal' if same else 'DIFFERENT'}"
        )


def report_optimal(
    workload: Workload, result: WhatifBenchResult, count: int, echo: Callable[[str], None]
) -> None:
    step = max(1, len(result.capacities) // count)
    picked = result.capacities[::step][:count]
    measure_from = len(workload.keys) // 2
    start = time.perf_counter()
    points = belady(workload.keys, picked, weights=workload.weights, measure_from=measure_from)
    seconds = time.perf_counter() - start
    echo("")
    echo(f"Belady's bound (block-optimal eviction), {len(picked)} capacities in {seconds:.2f} s:")
    for point in points:
        echo(
            f"  {point.capacity_blocks:>8,} blocks: optimal {point.hit_rate * 100:.3f}%, "
            f"LRU {result.curve.hit_rate(point.capacity_blocks) * 100:.3f}%"
        )
