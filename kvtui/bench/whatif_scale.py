"""`kvtui bench whatif --scale`: the what-if command itself at production scale, each case a fresh process
timed whole (start, parse, everything it prints) with its peak memory (VmHWM, polled), against the targets:

    one-pass   --method one-pass, the ceiling and Belady's bound included, three capacities (1M, 3M, 10M)
                                                                       at most 10 s and 1 GB
    simulated  --method simulated at one capacity (3M)                 at most 20 s and 1 GB
    million    --method one-pass --no-optimal on a 1,000,000-request workload, streamed (with --million)
                                                                       at most 120 s and 4 GB
    jobs       --method simulated at three capacities with --jobs 2 against --jobs 1: the same points

The workloads are kvtui.whatif.synth's (12,031 requests, and 1,000,000 with --million), written to a
temporary directory unless --workload names the 12k one. With --base DIR (another checkout of kvtui, e.g.
the main branch) each case also runs there, alternating which goes first, so that both see the same load;
medians over rounds, and the load average before and after, since timings on a shared machine mean little.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kvtui.bench.whatif import load_average

CASES = {
    "one-pass": (["--capacity", "1M,3M,10M", "--method", "one-pass"], 10.0, 1.0),
    "simulated": (["--capacity", "3M", "--method", "simulated"], 20.0, 1.0),
    "million": (["--capacity", "1M,3M,10M", "--method", "one-pass", "--no-optimal"], 120.0, 4.0),
}
GB = 1e9


@dataclass
class Timing:
    seconds: list[float] = field(default_factory=list)
    peak_bytes: list[int] = field(default_factory=list)
    output: str = ""


def peak_rss(pid: int) -> int:
    """The process's peak resident bytes so far (VmHWM: counted from its exec, not the parent's pages a fork
    shares), 0 where /proc cannot say."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_case(checkout: Path, workload: Path, args: list[str]) -> tuple[float, int, str]:
    """One `python -m kvtui whatif` in `checkout`: wall seconds, peak resident bytes, its stdout."""
    command = [sys.executable, "-m", "kvtui", "whatif", str(workload), *args, "--json", "-q"]
    peak = 0
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        child = subprocess.Popen(command, cwd=checkout, stdout=out, stderr=subprocess.DEVNULL)
        while child.poll() is None:
            peak = max(peak, peak_rss(child.pid))
            time.sleep(0.02)
        seconds = time.perf_counter() - start
        out.seek(0)
        text = out.read().decode()
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} (in {checkout}) exited {child.returncode}")
    return seconds, peak, text


def synth(path: Path, requests: int) -> Path:
    """kvtui.whatif.synth's workload, written by a process of its own (this one stays small)."""
    command = [sys.executable, "-m", "kvtui.whatif.synth", str(path), "--requests", str(requests)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=Path(__file__).resolve().parents[2])
    return path


def points_of(text: str) -> list[tuple]:
    report = json.loads(text)
    return [(p["capacity_tokens"], p["method"], round(p["token_hit_rate"], 12)) for p in report["points"]]


def run_scale(
    workload: str | None = None,
    repeats: int = 3,
    base: str | None = None,
    million: bool = False,
    jobs: int = 2,
    echo: Callable[[str], None] = print,
) -> dict:
    here = Path(__file__).resolve().parents[2]
    checkouts = {"this": here} | ({"base": Path(base).resolve()} if base else {})
    results: dict[str, dict[str, Timing]] = {}
    with tempfile.TemporaryDirectory(prefix="kvtui-bench-whatif-scale-") as tmp:
        if workload is None:
            path = synth(Path(tmp) / "mooncake_12k.jsonl", 12_031)
            echo(f"workload: kvtui.whatif.synth seed 0, 12,031 requests ({path.stat().st_size / 1e6:.1f} MB)")
        else:
            path = Path(workload)
            echo(f"workload: {path}")
        paths = {"one-pass": path, "simulated": path}
        if million:
            big = synth(Path(tmp) / "mooncake_1m.jsonl", 1_000_000)
            paths["million"] = big
            echo(f"workload: 1,000,000 requests ({big.stat().st_size / 1e6:.0f} MB)")
        before = load_average()
        for case, (args, _, _) in CASES.items():
            if case not in paths:
                continue
            results[case] = {name: Timing() for name in checkouts}
            for round_index in range(repeats):
                order = list(checkouts) if round_index % 2 == 0 else list(reversed(checkouts))
                for name in order:
                    seconds, peak, text = run_case(checkouts[name], paths[case], args)
                    timing = results[case][name]
                    timing.seconds.append(seconds)
                    timing.peak_bytes.append(peak)
                    timing.output = text
                    echo(f"  {case} round {round_index + 1} {name}: {seconds:.2f} s, {peak / GB:.2f} GB")
        jobs_same = None
        if jobs > 1:
            sweep = ["--capacity", "1M,3M,10M", "--method", "simulated"]
            serial = run_case(here, path, sweep + ["--jobs", "1"])
            parallel = run_case(here, path, sweep + ["--jobs", str(jobs)])
            jobs_same = points_of(serial[2]) == points_of(parallel[2])
            echo(
                f"  jobs: three simulated capacities, --jobs 1 {serial[0]:.1f} s, --jobs {jobs} "
                f"{parallel[0]:.1f} s, the same points: {jobs_same}"
            )
        after = load_average()
    report(results, checkouts, before, after, jobs_same, echo)
    return {"results": results, "jobs_same": jobs_same}


def report(results, checkouts, before, after, jobs_same, echo) -> None:
    echo("")
    echo(
        f"kvtui whatif at production scale, median of rounds (load average before: {before}; after: {after})"
    )
    echo(f"  {'case':<10} {'checkout':<8} {'seconds':>8} {'peak GB':>8}  target")
    for case, per in results.items():
        _, limit_s, limit_gb = CASES[case]
        for name, timing in per.items():
            seconds = statistics.median(timing.seconds)
            peak = max(timing.peak_bytes) / GB
            verdict = ""
            if name == "this":
                ok = seconds <= limit_s and peak <= limit_gb
                verdict = f"{limit_s:g} s, {limit_gb:g} GB: {'met' if ok else 'MISSED'}"
            echo(f"  {case:<10} {name:<8} {seconds:>8.2f} {peak:>8.2f}  {verdict}")
        if "base" in per:
            same = points_of(per["this"].output) == points_of(per["base"].output)
            echo(f"  {case:<10} the same points as the base: {same}")
    if jobs_same is not None:
        echo(f"  parallel sweep (--jobs) equals the serial one: {jobs_same}")
