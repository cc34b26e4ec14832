"""`kvtui bench decode`: decode throughput at batch sizes B, and the fraction of the memory bandwidth it uses.

For each B: B prompts are prefilled, then `steps` decode steps are timed (each step ends with the sampled
tokens on the host, so it is synchronised). A decode step must read every weight once and every running
sequence's K/V once, so bytes per step = weight bytes + sum over sequences of context x KV bytes per token
(ModelShape.kv_bytes_per_token). Achieved bandwidth = bytes per step / seconds per step, reported against the
machine's peak (--peak-tbs; the H200's HBM3e is 4.8 TB/s nominal, about 4.3 TB/s measured by a device copy).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from engine.core.request import SamplingParams


@dataclass
class DecodeRow:
    batch: int
    # mean context over the timed steps
    context: int
    step_s: float
    bytes_per_step: float

    @property
    def tokens_per_s(self) -> float:
        return self.batch / self.step_s

    @property
    # bytes / s
    def bandwidth(self) -> float:
        return self.bytes_per_step / self.step_s


def weight_bytes(model) -> int:
    seen, total = set(), 0
    # tied embeddings count once
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def _sync(engine) -> None:
    if engine.kv.kv.device.type == "cuda":
        torch.cuda.synchronize()


def measure_decode(
    engine,
    batches=(1, 8, 64),
    prompt_tokens: int = 512,
    steps: int = 64,
    progress: Callable[[str], None] = lambda msg: None,
) -> list[DecodeRow]:
    vocab = engine.model.config.vocab_size
    weights = weight_bytes(engine.model)
    per_token = engine.shape.kv_bytes_per_token()
    generator = torch.Generator().manual_seed(9)
    rows = []
    engine.generate(
        [torch.randint(100, vocab, (32,), generator=generator).tolist()],
        # warm up
        SamplingParams(max_tokens=4, ignore_eos=True),
    )
    for batch in batches:
        progress(f"batch {batch}: prefill {batch} x {prompt_tokens} tokens, then {steps} decode steps")
        params = SamplingParams(max_tokens=steps + 4, ignore_eos=True)
        ids = [
            engine.submit(torch.randint(100, vocab, (prompt_tokens,), generator=generator).tolist(), params)
            for _ in range(batch)
        ]
        while any(not engine.requests[i].output_token_ids for i in ids):
            engine.step()
        # every request decodes from here on
        engine.step()
        _sync(engine)
        times = []
        contexts = []
        for _ in range(steps):
            contexts.append(sum(engine.requests[i].num_tokens for i in ids))
            start = time.perf_counter()
            engine.step()
            times.append(time.perf_counter() - start)
        for i in ids:
            engine.abort(i)
        step_s = statistics.median(times)
        context = statistics.mean(contexts)
        rows.append(DecodeRow(batch, int(context / batch), step_s, weights + context * per_token))
    return rows


def format_decode(rows: list[DecodeRow], peak_tbs: float | None, copy_tbs: float | None) -> str:
    head = f"{'batch':>5} {'context':>7} {'step ms':>8} {'tok/s':>9} {'GB/step':>8} {'TB/s':>6}"
    if peak_tbs:
        head += f" {'of peak':>8}"
    if copy_tbs:
        head += f" {'of copy':>8}"
    # a step's cost against batch 1's, where batch 1 ran: what batching costs (a batch of 8 should stay within 2x)
    one = next((r for r in rows if r.batch == 1), None)
    if one is not None:
        head += f" {'x batch 1':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        tbs = r.bandwidth / 1e12
        line = (
            f"{r.batch:>5} {r.context:>7} {r.step_s * 1000:>8.2f} {r.tokens_per_s:>9.1f} "
            f"{r.bytes_per_step / 1e9:>8.3f} {tbs:>6.3f}"
        )
        if peak_tbs:
            line += f" {tbs / peak_tbs:>8.1%}"
        if copy_tbs:
            line += f" {tbs / copy_tbs:>8.1%}"
        if one is not None:
            line += f" {r.step_s / one.step_s:>8.2f}x"
        lines.append(line)
    known = [f"peak {peak_tbs} TB/s"] if peak_tbs else []
    known += [f"measured copy {copy_tbs:.3g} TB/s"] if copy_tbs else []
    lines.append(
        "bytes per step = weights + every sequence's K/V read once" + "".join(f"; {k}" for k in known)
    )
    return "\n".join(lines)
