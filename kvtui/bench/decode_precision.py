"""`kvtui bench decode --kv-dtype`: decode at long contexts with 8-bit K/V against the same engine storing K/V
exactly, in one run.

Two engines share the model. For each context length both prefill the same prompts once; then the timed rounds
alternate between them (the order swapped every round), so load on a shared machine falls on both alike. A
round is `steps` decode steps; a round's figure is its median step, the table's the median over rounds. At long
contexts a decode step's K/V reads rival the weights': 8-bit rows are a quarter of float32's bytes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from engine.core.request import SamplingParams
from kvtui.bench.decode import weight_bytes


@dataclass
class PrecisionRow:
    context: int
    batch: int
    # K/V precision -> median step seconds of each round
    rounds: dict[str, list[float]] = field(default_factory=dict)
    # K/V precision -> bytes a step reads (weights + every sequence's K/V)
    bytes_per_step: dict[str, float] = field(default_factory=dict)

    def step_s(self, name: str) -> float:
        return statistics.median(self.rounds[name])


def _prefill(engine, prompts, max_tokens: int) -> list[str]:
    """Submit the prompts and step until each has produced a token and every one decodes from here on."""
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    ids = [engine.submit(prompt, params) for prompt in prompts]
    while any(not engine.requests[i].output_token_ids for i in ids):
        engine.step()
    engine.step()
    return ids


def measure_precision(
    engines: dict,
    contexts=(2048, 8192),
    batch: int = 1,
    steps: int = 16,
    rounds: int = 5,
    progress: Callable[[str], None] = lambda msg: None,
) -> list[PrecisionRow]:
    """engines: K/V precision name -> engine (one model). Rows per context length."""
    first = next(iter(engines.values()))
    vocab = first.model.config.vocab_size
    weights = weight_bytes(first.model)
    names = list(engines)
    rows = []
    decoded = steps * (rounds + 1) + 4
    limit = getattr(first.model.config, "max_position_embeddings", None)
    for wanted in contexts:
        # the decoded tokens must fit the model's positions: a context at its limit starts a little earlier
        context = min(wanted, limit - decoded) if limit else wanted
        generator = torch.Generator().manual_seed(context)
        prompts = [torch.randint(100, vocab, (context,), generator=generator).tolist() for _ in range(batch)]
        row = PrecisionRow(context, batch)
        running = {}
        for name, engine in engines.items():
            progress(f"context {context}: {name} prefills {batch} x {context} tokens")
            running[name] = _prefill(engine, prompts, decoded)
            row.rounds[name] = []
            row.bytes_per_step[name] = weights + batch * context * engine.shape.kv_bytes_per_token()
        # one untimed round each: first steps at a new length pay for allocations and caches
        for name in names:
            for _ in range(steps):
                engines[name].step()
        for r in range(rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                engine, times = engines[name], []
                for _ in range(steps):
                    start = time.perf_counter()
                    engine.step()
                    times.append(time.perf_counter() - start)
                row.rounds[name].append(statistics.median(times))
            progress(
                f"context {context} round {r + 1}/{rounds}: "
                + ", ".join(f"{n} {row.rounds[n][-1] * 1e3:.1f} ms" for n in names)
            )
        for name, engine in engines.items():
            for i in running[name]:
                engine.abort(i)
        rows.append(row)
    return rows


def format_precision(rows: list[PrecisionRow], names: list[str]) -> str:
    """One line per context and precision: step time, tokens/s, bytes a step reads, speed against the first."""
    base = names[0]
    head = f"{'context':>7} {'batch':>5} {'K/V':<10} {'step ms':>8} {'min ms':>7} {'tok/s':>8} {'GB/step':>8} {'speed':>7}"
    lines = [head, "-" * len(head)]
    for row in rows:
        for name in names:
            step = row.step_s(name)
            lines.append(
                f"{row.context:>7} {row.batch:>5} {name:<10} {step * 1e3:>8.2f} {min(row.rounds[name]) * 1e3:>7.2f} "
                f"{row.batch / step:>8.2f} {row.bytes_per_step[name] / 1e9:>8.3f} "
                f"{row.step_s(base) / step:>6.2f}x"
            )
    rounds = len(rows[0].rounds[base]) if rows else 0
    lines.append(
        f"step ms: median over {rounds} rounds (each the median of its steps; the precisions alternate, the "
        f"order swapped every round); speed: {base}'s step time / this one's"
    )
    return "\n".join(lines)
