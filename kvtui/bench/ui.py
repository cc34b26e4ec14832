"""UI benchmarks (`kvtui bench ui`): replay ingest, trace parsing, seek and frame times on a big trace.

Measures replay ingest (reducer + keyframes, events/s), JSON parse rate of a trace file, seek time at random
points of a large trace, and the time to render one full frame of each view. The trace is a real run of our
own engine, recorded in memory: a tiny randomly initialised hybrid model (sliding-window and full layers, so
the rings have work too) serving requests that share a few system prompts, with some forks and edits, on a
pool small enough to evict. Or any trace file (`--trace`), such as the recordings in fixtures/traces/.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# a tiny Gemma-3-style model: one sliding-window layer (W=8) and one full-attention layer, 97-token vocabulary
TINY_MODEL = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=48,
    max_position_embeddings=4096,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    sliding_window=8,
    layer_types=["sliding_attention", "full_attention"],
)


def record_trace(
    n_events: int,
    seed: int = 11,
    block_size: int = 16,
    num_blocks: int = 1024,
    running: int = 48,
    edit_rate: float = 0.01,
    fork_rate: float = 0.01,
    progress: Callable[[str], None] = lambda msg: None,
) -> tuple[dict, list[dict]]:
    """Header and the first `n_events` events of a run of our engine on a tiny random model (no download).

    About 30k events/s on a CPU: requests are submitted so that `running` stay in flight; after each step a
    finished request is edited with probability `edit_rate` and a running one forked with `fork_rate`.
    """
    import torch
    import transformers

    from engine.core.request import SamplingParams
    from engine.engine import Engine, EngineConfig

    config = transformers.Gemma3TextConfig(**TINY_MODEL)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    # random weights: run every request to its max_tokens
    model.generation_config.eos_token_id = None
    engine = Engine.from_model(
        model,
        config=EngineConfig(
            device="cpu", block_size=block_size, num_blocks=num_blocks, max_num_seqs=running + 16
        ),
    )
    events: list[dict] = []
    engine.trace.listeners.append(events.append)
    rng = random.Random(seed)
    vocab = TINY_MODEL["vocab_size"]
    tokens = lambda n: [rng.randrange(3, vocab) for _ in range(n)]  # noqa: E731
    systems = [tokens(rng.randrange(16, 96)) for _ in range(6)]
    in_flight: set[str] = set()
    # request id -> its tokens when it finished
    finished: dict[str, list[int]] = {}
    threads = torch.get_num_threads()
    # a tiny model: one thread is faster than many
    torch.set_num_threads(1)
    next_report = 100_000
    try:
        while len(events) < n_events:
            while len(in_flight) < running:
                params = SamplingParams(max_tokens=rng.randrange(8, 96), ignore_eos=True)
                in_flight.add(engine.submit(rng.choice(systems) + tokens(rng.randrange(4, 64)), params))
            for out in engine.step():
                in_flight.discard(out.request_id)
                finished[out.request_id] = out.prompt_token_ids + out.token_ids
            if finished and rng.random() < edit_rate:
                rid = rng.choice(sorted(finished))
                engine.edit(rid, rng.randrange(len(finished.pop(rid))), tokens(1), "replace")
                in_flight.add(rid)
            if in_flight and rng.random() < fork_rate:
                in_flight.update(engine.fork(rng.choice(sorted(in_flight))))
            if len(events) >= next_report:
                progress(f"recorded {len(events):,} events")
                next_report += 100_000
    finally:
        torch.set_num_threads(threads)
    return engine.trace.header, events[:n_events]


def read_trace_file(path: str | Path) -> tuple[dict, list[dict]]:
    from engine.trace import read_trace

    trace = read_trace(path, strict=True)
    return trace.header, trace.events


def write_trace_file(path: str | Path, header: dict, events: list[dict]) -> None:
    from engine.trace import TraceWriter

    writer = TraceWriter(path)
    writer.write_header(header)
    for event in events:
        writer.write(event)
    writer.close()


def bench_ingest(header, events) -> float:
    from kvtui.state.timeline import Timeline

    t0 = time.perf_counter()
    Timeline(header, events)
    return len(events) / (time.perf_counter() - t0)


def bench_parse(header, events) -> float:
    from engine.trace import read_trace

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.jsonl"
        write_trace_file(path, header, events)
        t0 = time.perf_counter()
        # what replay reads with (kvtui.app.loader): every field checked
        read_trace(path, allow_unknown=True)
        return len(events) / (time.perf_counter() - t0)


def bench_seek(header, events, samples: int = 30) -> tuple[float, float]:
    from kvtui.state.timeline import Timeline

    tl = Timeline(header, events)
    rng = random.Random(0)
    times = []
    for _ in range(samples):
        k = rng.randrange(len(events))
        t0 = time.perf_counter()
        tl.state_at(k)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), max(times)


def run(
    header: dict,
    events: list[dict],
    parse: bool = False,
    frames: bool = True,
    echo: Callable[[str], None] = print,
) -> None:
    """Print every UI figure for one trace."""
    rate = bench_ingest(header, events)
    echo(f"ingest (reducer + keyframes): {rate:,.0f} events/s")
    med, worst = bench_seek(header, events)
    echo(f"seek to a random event: median {med * 1000:.1f} ms, worst {worst * 1000:.1f} ms")
    if parse:
        echo(f"parse + validate a trace file: {bench_parse(header, events):,.0f} events/s")
    if frames:
        from kvtui.bench.frames import bench_frames, format_ms

        for name, ms in bench_frames(header, events).items():
            echo(f"render one frame, {name}: {format_ms(ms)}")
