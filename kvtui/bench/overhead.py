"""`kvtui bench overhead`: what the engine adds to each step around the model's own forward, by context size.

One stream. For each context size the prompt is prefilled, then `steps` decode steps run; every step is timed
whole (engine.step) and its model call alone (ModelRunner.model_seconds, synchronised on a GPU). Overhead =
step - model: scheduling, block tables, slot maps, the batch, sampling, the trace and the prefix bookkeeping.
The target is a small fraction of a step that does not grow with the context.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from engine.core.request import SamplingParams


@dataclass
class OverheadRow:
    context: int
    # "decode" or "prefill"
    phase: str
    # median per step
    step_ms: float
    model_ms: float
    steps: int

    @property
    def overhead_ms(self) -> float:
        return self.step_ms - self.model_ms

    @property
    def fraction(self) -> float:
        return self.overhead_ms / self.step_ms if self.step_ms else float("nan")


def _timed_steps(engine, count: int) -> tuple[list[float], list[float]]:
    steps, engine.runner.model_seconds = [], []
    for _ in range(count):
        start = time.perf_counter()
        engine.step()
        steps.append(time.perf_counter() - start)
    model, engine.runner.model_seconds = engine.runner.model_seconds, None
    return steps, model


def measure_overhead(
    engine, contexts=(1024, 4096, 8192), steps: int = 32, progress: Callable[[str], None] = lambda msg: None
) -> list[OverheadRow]:
    vocab = engine.model.config.vocab_size
    limit = getattr(engine.model.config, "max_position_embeddings", None) or max(contexts) + steps + 1
    generator = torch.Generator().manual_seed(5)
    engine.generate(
        [torch.randint(100, vocab, (64,), generator=generator).tolist()],
        # warm up
        SamplingParams(max_tokens=4, ignore_eos=True),
    )
    rows = []
    for context in contexts:
        prompt_len = min(context, limit - steps - 2)
        prompt = torch.randint(100, vocab, (prompt_len,), generator=generator).tolist()
        progress(f"context {prompt_len}: prefill, then {steps} decode steps")
        rid = engine.submit(prompt, SamplingParams(max_tokens=steps + 2, ignore_eos=True))
        prefill_steps, prefill_model = [], []
        while engine.requests[rid].num_computed < prompt_len:
            s, m = _timed_steps(engine, 1)
            prefill_steps += s
            prefill_model += m
        # the first decode (allocates and warms up the shapes)
        engine.step()
        decode_steps, decode_model = _timed_steps(engine, steps)
        engine.abort(rid)
        rows.append(
            OverheadRow(
                prompt_len,
                "prefill",
                statistics.median(prefill_steps) * 1000,
                statistics.median(prefill_model) * 1000,
                len(prefill_steps),
            )
        )
        rows.append(
            OverheadRow(
                prompt_len,
                "decode",
                statistics.median(decode_steps) * 1000,
                statistics.median(decode_model) * 1000,
                len(decode_steps),
            )
        )
    return rows


def format_overhead(rows: list[OverheadRow]) -> str:
    head = f"{'context':>8} {'phase':<8} {'steps':>5} {'step ms':>8} {'model ms':>9} {'overhead ms':>11} {'share':>6}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.context:>8} {r.phase:<8} {r.steps:>5} {r.step_ms:>8.2f} {r.model_ms:>9.2f} "
            f"{r.overhead_ms:>11.2f} {r.fraction:>6.1%}"
        )
    lines.append("overhead = median step - median model call (target: <= 5% of a step, flat in the context)")
    return "\n".join(lines)
