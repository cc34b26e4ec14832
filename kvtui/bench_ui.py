"""UI benchmarks (run by hand, not a timed test): `python -m kvtui.bench_ui [--events N]`.

Measures replay ingest (reducer + keyframes, events/s), JSON parse rate of a trace file, seek time at random
points of a large synthetic trace, and the time to render one full frame of each view.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path


def _synthetic(n_events: int):
    from kvtui.synthetic import generate

    return generate(num_requests=10 ** 7, seed=11, block_size=16, num_blocks=1024, window=8, edit_rate=0.01,
                    fork_rate=0.01, max_events=n_events)


def bench_ingest(header, events) -> float:
    from kvtui.timeline import Timeline

    t0 = time.perf_counter()
    Timeline(header, events)
    return len(events) / (time.perf_counter() - t0)


def bench_parse(header, events) -> float:
    from engine.trace import read_trace
    from kvtui.synthetic import write_trace

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.jsonl"
        write_trace(path, header, events)
        t0 = time.perf_counter()
        read_trace(path)
        return len(events) / (time.perf_counter() - t0)


def bench_seek(header, events, samples: int = 30) -> tuple[float, float]:
    from kvtui.timeline import Timeline

    tl = Timeline(header, events)
    rng = random.Random(0)
    times = []
    for _ in range(samples):
        k = rng.randrange(len(events))
        t0 = time.perf_counter()
        tl.state_at(k)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--parse", action="store_true", help="also measure JSON parsing of a trace file")
    args = parser.parse_args()
    t0 = time.perf_counter()
    header, events = _synthetic(args.events)
    print(f"synthetic trace: {len(events):,} events, {header['num_blocks']} blocks "
          f"(generated in {time.perf_counter() - t0:.1f} s)")
    rate = bench_ingest(header, events)
    print(f"ingest (reducer + keyframes): {rate:,.0f} events/s")
    med, worst = bench_seek(header, events)
    print(f"seek to a random event: median {med * 1000:.1f} ms, worst {worst * 1000:.1f} ms")
    if args.parse:
        print(f"parse + validate a trace file: {bench_parse(header, events):,.0f} events/s")
    from kvtui.bench_frames import bench_frames

    for name, ms in bench_frames(header, events).items():
        print(f"render one frame, {name}: {ms:.2f} ms")


if __name__ == "__main__":
    main()
