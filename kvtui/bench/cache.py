"""Cache benchmarks (`kvtui bench --cache`): warm vs cold TTFT with a shared prefix, and re-prefill after an edit.

Each request runs alone so its TTFT is its own prefill (no queueing behind others). Cold and warm prompts have
equal length; cold prompts share nothing, warm ones share `shared_fraction` of their tokens with a request
that ran first (the warm-up that fills the cache). Medians are compared, with p95 alongside.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from engine.core.request import SamplingParams
from engine.trace.metrics import percentile

ONE_TOKEN = SamplingParams(max_tokens=1, ignore_eos=True)


def _random_tokens(vocab: int, n: int, generator: torch.Generator) -> list[int]:
    return torch.randint(100, vocab, (n,), generator=generator).tolist()


def _ttft(engine, prompt: list[int]) -> float:
    return engine.generate([prompt], ONE_TOKEN)[0].ttft


@dataclass
class WarmCold:
    prompt_tokens: int
    shared_tokens: int
    cold: list[float]
    warm: list[float]
    cached_tokens: int

    @property
    def ratio(self) -> float:
        return percentile(self.warm, 50) / percentile(self.cold, 50)


def warm_vs_cold(
    engine,
    prompt_tokens: int = 512,
    shared_fraction: float = 0.9,
    requests: int = 8,
    progress: Callable[[str], None] = lambda msg: None,
) -> WarmCold:
    vocab = engine.model.config.vocab_size
    generator = torch.Generator().manual_seed(7)
    shared = _random_tokens(vocab, int(prompt_tokens * shared_fraction), generator)
    suffix = prompt_tokens - len(shared)
    # warm up the kernels, not the cache
    _ttft(engine, _random_tokens(vocab, prompt_tokens, generator))
    progress(f"cold: {requests} prompts of {prompt_tokens} tokens sharing nothing")
    cold = [_ttft(engine, _random_tokens(vocab, prompt_tokens, generator)) for _ in range(requests)]
    progress(f"warm: {requests} prompts sharing their first {len(shared)} tokens")
    # fills the cache with the shared prefix
    _ttft(engine, shared + _random_tokens(vocab, suffix, generator))
    warm, cached = [], 0
    for _ in range(requests):
        out = engine.generate([shared + _random_tokens(vocab, suffix, generator)], ONE_TOKEN)[0]
        warm.append(out.ttft)
        cached = out.cached_tokens
    return WarmCold(prompt_tokens, len(shared), cold, warm, cached)


@dataclass
class EditCost:
    position: int
    tokens: int
    # median seconds to prefill all n tokens cold
    full_prefill: float
    # median seconds to prefill again after the edit at m
    reprefill: float
    recompute_tokens: int

    @property
    def ratio(self) -> float:
        return self.reprefill / self.full_prefill

    @property
    def target(self) -> float:
        return 1.2 * (self.tokens - self.position) / self.tokens


def edit_reprefill(
    engine,
    prompt_tokens: int = 512,
    positions: tuple[float, ...] = (0.25, 0.5, 0.75, 0.95),
    repeats: int = 3,
    progress: Callable[[str], None] = lambda msg: None,
) -> list[EditCost]:
    """For each m: TTFT of a cold n-token prompt vs TTFT after editing token m of that finished request."""
    vocab = engine.model.config.vocab_size
    generator = torch.Generator().manual_seed(8)
    _ttft(engine, _random_tokens(vocab, prompt_tokens, generator))
    rows = []
    for fraction in positions:
        m = int(prompt_tokens * fraction)
        full, again, recompute = [], [], 0
        for _ in range(repeats):
            prompt = _random_tokens(vocab, prompt_tokens, generator)
            out = engine.generate([prompt], ONE_TOKEN)[0]
            full.append(out.ttft)
            event = engine.edit(out.request_id, m, [(prompt[m] + 1) % vocab], "replace")
            recompute = event["recompute_tokens"]
            while engine.requests[out.request_id].finish_reason is None:
                engine.step()
            again.append(engine.output(out.request_id).ttft)
        progress(f"edit at {m} of {prompt_tokens}: recompute {recompute} tokens")
        rows.append(EditCost(m, prompt_tokens, percentile(full, 50), percentile(again, 50), recompute))
    return rows


def format_cache_bench(warm: WarmCold, edits: list[EditCost]) -> str:
    p = lambda values, q: percentile(values, q) * 1000  # noqa: E731
    lines = [
        f"warm vs cold TTFT: {warm.prompt_tokens}-token prompts, {warm.shared_tokens} shared "
        f"({warm.shared_tokens / warm.prompt_tokens:.0%}), {warm.cached_tokens} served from the cache",
        f"  cold p50 {p(warm.cold, 50):.1f} ms  p95 {p(warm.cold, 95):.1f} ms",
        f"  warm p50 {p(warm.warm, 50):.1f} ms  p95 {p(warm.warm, 95):.1f} ms",
        f"  warm / cold (p50) = {warm.ratio:.3f}   (target <= 0.15)",
        "",
        "re-prefill after an edit at m of n vs a full prefill (medians):",
        f"  {'m':>5} {'n':>5} {'recompute':>9} {'full ms':>8} {'edit ms':>8} {'ratio':>6} {'1.2(n-m)/n':>10}",
    ]
    for e in edits:
        verdict = "ok" if e.ratio <= e.target else "over"
        lines.append(
            f"  {e.position:>5} {e.tokens:>5} {e.recompute_tokens:>9} {e.full_prefill * 1000:>8.1f} "
            f"{e.reprefill * 1000:>8.1f} {e.ratio:>6.3f} {e.target:>10.3f} {verdict}"
        )
    return "\n".join(lines)
