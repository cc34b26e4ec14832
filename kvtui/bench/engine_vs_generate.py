"""`kvtui bench`: our engine against transformers' generate on the same model, measured in the same run.

Scenarios: one stream (ours vs generate), and N concurrent prompts (ours batched vs generate one after
another, and vs transformers' own continuous-batching `generate_batch` when it runs here). Machines are noisy,
so every number is compared with a baseline measured minutes apart in the same process.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from engine.core.request import SamplingParams
from engine.models.loading import stock_attention


@dataclass
class BenchRow:
    scenario: str
    system: str
    tokens: int
    seconds: float
    # mean seconds
    ttft: float | None
    # mean seconds
    tpot: float | None
    # system this row is compared with
    baseline: str | None = None
    # tokens/s of this row / tokens/s of the baseline
    ratio: float | None = None
    note: str = ""

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else float("nan")


def bench_prompts(vocab: int, prompt_tokens: int, count: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(1234)
    return [torch.randint(100, vocab, (prompt_tokens,), generator=generator).tolist() for _ in range(count)]


def _generate_config(model, max_tokens: int):
    config = copy.deepcopy(model.generation_config)
    config.max_new_tokens = max_tokens
    # same token count as ours, which ignores EOS here
    config.min_new_tokens = max_tokens
    config.do_sample = False
    return config


@torch.inference_mode()
def hf_generate(model, prompt: list[int], max_tokens: int) -> tuple[float, float]:
    """(seconds for max_tokens tokens, seconds for the first token) with transformers' generate."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt], device=device)
    mask = torch.ones_like(ids)
    with stock_attention(model):
        start = time.perf_counter()
        model.generate(ids, attention_mask=mask, generation_config=_generate_config(model, 1))
        ttft = time.perf_counter() - start
        start = time.perf_counter()
        model.generate(ids, attention_mask=mask, generation_config=_generate_config(model, max_tokens))
        total = time.perf_counter() - start
    return total, ttft


def ours(engine, prompts: list[list[int]], max_tokens: int) -> BenchRow:
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    start = time.perf_counter()
    outputs = engine.generate(prompts, params)
    seconds = time.perf_counter() - start
    tpots = [o.tpot for o in outputs if o.tpot is not None]
    return BenchRow(
        "",
        "kvtui engine",
        sum(len(o.token_ids) for o in outputs),
        seconds,
        sum(o.ttft for o in outputs) / len(outputs),
        sum(tpots) / len(tpots) if tpots else None,
    )


def hf_batch(model, prompts: list[list[int]], max_tokens: int) -> BenchRow:
    with stock_attention(model):
        start = time.perf_counter()
        results = model.generate_batch(prompts, generation_config=_generate_config(model, max_tokens))
        seconds = time.perf_counter() - start
    tokens = sum(len(r.generated_tokens) for r in results.values())
    return BenchRow("", "transformers generate_batch", tokens, seconds, None, None)


def run_bench(
    engine,
    prompt_tokens: int = 64,
    max_tokens: int = 32,
    concurrent: int = 8,
    repeats: int = 1,
    progress: Callable[[str], None] = lambda msg: None,
) -> list[BenchRow]:
    model = engine.model
    prompts = bench_prompts(model.config.vocab_size, prompt_tokens, concurrent)
    progress("warming up")
    ours(engine, prompts[:1], 2)
    hf_generate(model, prompts[0], 2)

    def best(fn):
        runs = [fn() for _ in range(max(1, repeats))]
        return min(runs, key=lambda r: r.seconds)

    rows: list[BenchRow] = []
    progress("single stream: transformers generate")

    def hf_single():
        seconds, ttft = hf_generate(model, prompts[0], max_tokens)
        return BenchRow(
            "single stream",
            "transformers generate",
            max_tokens,
            seconds,
            ttft,
            (seconds - ttft) / (max_tokens - 1) if max_tokens > 1 else None,
        )

    base = best(hf_single)
    progress("single stream: kvtui engine")
    mine = best(lambda: ours(engine, prompts[:1], max_tokens))
    mine.scenario = "single stream"
    mine.baseline, mine.ratio = base.system, mine.tokens_per_s / base.tokens_per_s
    rows += [base, mine]

    scenario = f"{concurrent} concurrent"
    progress(f"{scenario}: transformers generate, one after another")

    def hf_sequential():
        total, ttfts, tpots, clock = 0.0, [], [], 0.0
        for prompt in prompts:
            seconds, ttft = hf_generate(model, prompt, max_tokens)
            # a request queued behind the others waits for them
            ttfts.append(clock + ttft)
            clock += seconds
            tpots.append((seconds - ttft) / (max_tokens - 1) if max_tokens > 1 else 0.0)
            total += seconds
        return BenchRow(
            scenario,
            "transformers generate, sequential",
            max_tokens * len(prompts),
            total,
            sum(ttfts) / len(ttfts),
            sum(tpots) / len(tpots),
        )

    seq = best(hf_sequential)
    progress(f"{scenario}: kvtui engine, batched")
    batched = best(lambda: ours(engine, prompts, max_tokens))
    batched.scenario = scenario
    batched.system = "kvtui engine, batched"
    batched.baseline, batched.ratio = seq.system, batched.tokens_per_s / seq.tokens_per_s
    rows += [seq, batched]
    progress(f"{scenario}: transformers generate_batch")
    try:
        cb = best(lambda: hf_batch(model, prompts, max_tokens))
        cb.scenario = scenario
        batched_vs_cb = BenchRow(
            scenario,
            "kvtui engine, batched",
            batched.tokens,
            batched.seconds,
            batched.ttft,
            batched.tpot,
            cb.system,
            batched.tokens_per_s / cb.tokens_per_s,
        )
        rows += [cb, batched_vs_cb]
    # transformers' continuous batching is optional here; say why it did not run
    except Exception as exc:
        rows.append(
            BenchRow(
                scenario,
                "transformers generate_batch",
                0,
                0.0,
                None,
                None,
                note=f"did not run: {type(exc).__name__}: {str(exc)[:80]}",
            )
        )
    return rows


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def format_table(rows: list[BenchRow]) -> str:
    head = f"{'scenario':<14} {'system':<34} {'tokens':>6} {'sec':>7} {'tok/s':>8} {'TTFT ms':>8} {'TPOT ms':>8}  ratio"
    lines = [head, "-" * len(head)]
    for r in rows:
        ratio = f"{r.ratio:.2f}x vs {r.baseline}" if r.ratio is not None else r.note
        tps = f"{r.tokens_per_s:.1f}" if r.seconds else "-"
        lines.append(
            f"{r.scenario:<14} {r.system:<34} {r.tokens:>6} {r.seconds:>7.2f} {tps:>8} "
            f"{_ms(r.ttft):>8} {_ms(r.tpot):>8}  {ratio}"
        )
    return "\n".join(lines)
