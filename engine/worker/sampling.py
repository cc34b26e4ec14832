"""Choose the next token from one row of logits: greedy, or temperature with top-k / top-p and a seed."""

from __future__ import annotations

import torch

from engine.core.request import SamplingParams


def make_generator(params: SamplingParams) -> torch.Generator | None:
    if params.temperature == 0:
        return None
    generator = torch.Generator()
    if params.seed is not None:
        generator.manual_seed(params.seed)
    else:
        generator.seed()
    return generator


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    """One token from one row (the runner takes a greedy step's argmax for every row at once instead)."""
    if params.temperature == 0:
        return int(torch.argmax(logits))
    scores = logits.float().cpu() / params.temperature
    if params.top_k:
        kth = torch.topk(scores, min(params.top_k, scores.shape[-1])).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True)
        cumulative = torch.softmax(sorted_scores, dim=-1).cumsum(-1)
        # drop a token once the mass before it already reaches top_p (the first token always stays)
        drop = (cumulative - torch.softmax(sorted_scores, dim=-1)) >= params.top_p
        scores[order[drop]] = float("-inf")
    probs = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))
