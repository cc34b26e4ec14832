"""`kvtui bench mixed`: many concurrent requests of mixed prompt lengths, our engine against transformers.

N prompts (default 64) with lengths drawn uniformly from [16, 512], each generating `max_tokens` tokens:
    ours                 every prompt submitted at once, continuous batching over the paged cache
    padded generate      transformers' generate on one left-padded batch of all N (its DynamicCache)
    generate_batch       transformers' own continuous batching (paged, with its scheduler)
The three run in turn inside every repeat; the ratios are medians of per-repeat throughput ratios.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from engine.core.request import SamplingParams
from engine.models.loading import stock_attention
from kvtui.bench.engine_vs_generate import _generate_config


def mixed_prompts(vocab: int, count: int, shortest: int, longest: int, seed: int = 21) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(shortest, longest + 1, (count,), generator=generator).tolist()
    return [torch.randint(100, vocab, (n,), generator=generator).tolist() for n in lengths]


@torch.inference_mode()
def padded_generate(model, prompts: list[list[int]], max_tokens: int) -> int:
    """One left-padded batch through generate; returns the tokens generated."""
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    config = _generate_config(model, max_tokens)
    config.pad_token_id = 0
    with stock_attention(model):
        out = model.generate(ids.to(device), attention_mask=mask.to(device), generation_config=config)
    return (out.shape[1] - width) * len(prompts)


def generate_batch(model, prompts: list[list[int]], max_tokens: int) -> int:
    with stock_attention(model):
        results = model.generate_batch(
            prompts, generation_config=_generate_config(model, max_tokens), progress_bar=False
        )
    return sum(len(r.generated_tokens) for r in results.values())


def ours(engine, prompts: list[list[int]], max_tokens: int) -> int:
    outputs = engine.generate(prompts, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    return sum(len(o.token_ids) for o in outputs)


@dataclass
class MixedResult:
    count: int
    lengths: tuple[int, int]
    max_tokens: int
    # system -> seconds per repeat
    seconds: dict[str, list[float]] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def ratio(self, baseline: str) -> float | None:
        if baseline not in self.seconds or not self.seconds[baseline]:
            return None
        per = [
            (self.tokens["kvtui engine"] / e) / (self.tokens[baseline] / b)
            for e, b in zip(self.seconds["kvtui engine"], self.seconds[baseline])
        ]
        return statistics.median(per)


def run_mixed(
    engine,
    count: int = 64,
    shortest: int = 16,
    longest: int = 512,
    max_tokens: int = 32,
    repeats: int = 1,
    progress: Callable[[str], None] = lambda msg: None,
    generate_batch_too: bool = True,
) -> MixedResult:
    model = engine.model
    prompts = mixed_prompts(model.config.vocab_size, count, shortest, longest)
    systems = {
        "kvtui engine": lambda: ours(engine, prompts, max_tokens),
        "transformers padded generate": lambda: padded_generate(model, prompts, max_tokens),
        "transformers generate_batch": lambda: generate_batch(model, prompts, max_tokens),
    }
    if not generate_batch_too:
        del systems["transformers generate_batch"]
    result = MixedResult(count, (shortest, longest), max_tokens)
    progress("warming up")
    ours(engine, prompts[:2], 2)
    padded_generate(model, prompts[:2], 2)
    for r in range(repeats):
        for name, run in systems.items():
            if name in result.failed:
                continue
            progress(f"repeat {r + 1}/{repeats}: {name}")
            start = time.perf_counter()
            try:
                result.tokens[name] = run()
            # transformers' continuous batching may not run on this setup: say why
            except Exception as exc:
                result.failed[name] = f"{type(exc).__name__}: {str(exc)[:100]}"
                continue
            result.seconds.setdefault(name, []).append(time.perf_counter() - start)
    return result


def format_mixed(result: MixedResult) -> str:
    lo, hi = result.lengths
    lines = [
        f"{result.count} concurrent requests, prompts of {lo}-{hi} tokens, {result.max_tokens} new tokens each",
        f"{'system':<30} {'tokens':>7} {'sec (median)':>12} {'tok/s':>8}  ours / it",
    ]
    for name, seconds in result.seconds.items():
        median = statistics.median(seconds)
        ratio = "" if name == "kvtui engine" else f"{result.ratio(name):.2f}x"
        lines.append(
            f"{name:<30} {result.tokens[name]:>7} {median:>12.2f} {result.tokens[name] / median:>8.1f}  "
            f"{ratio}"
        )
    for name, why in result.failed.items():
        lines.append(f"{name:<30} did not run: {why}")
    lines.append(
        "targets: >= 1.5x padded generate, >= 2x generate_batch (throughput, median of per-repeat ratios)"
    )
    return "\n".join(lines)
