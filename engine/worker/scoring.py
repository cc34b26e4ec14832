"""Prompt log-probabilities: `SamplingParams(prompt_logprobs=True)` (vLLM's name) and `Engine.score(text)`.

The log-probability of prompt token p comes from the logits at position p - 1, so a scored request keeps every
row of its prefill chunks, not only the last: chunk [start, start + n) gives the tokens start + 1 .. start + n
(those still in the prompt). Every cache path computes them: paged, chunked, rings and sinks run the scored
chunks as any other.

A prefix hit (or an edit, or a fork) skips the positions it reuses, and the K/V it reuses are not logits: the
log-probabilities of that span are missing. The scoring request computes what it needs (vLLM v1 instead skips
the prefix lookup for such requests): before its chunk runs, the runner computes the span again as a probe
(`ModelRunner.score_span`) that writes nothing the cache holds: its paged layers read the reused blocks as a
prefix (the prefix-hit read path) and never write; its ring layers run from position 0 in a probe row of their
own (a ring restored from a snapshot holds only the last W positions), freed afterwards. The probe emits no
event: the cache is unchanged, so the trace is too. The K/V reuse still saves the scored request nothing in
compute for that span; it saves its memory writes and keeps sharing the blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def token_logprobs(logits: torch.Tensor, targets: list[int]) -> torch.Tensor:
    """[m] log softmax(logits[i])[targets[i]] for the first m = len(targets) rows of `logits` [n, vocab]."""
    rows = logits[: len(targets)].float()
    index = torch.tensor(targets, device=rows.device)[:, None]
    return rows.gather(1, index)[:, 0] - torch.logsumexp(rows, dim=-1)


@dataclass
class Score:
    """What `Engine.score` returns: every prompt token with its log-probability (the first has none)."""

    token_ids: list[int]
    # natural log; logprobs[0] is None (no context predicts the first token)
    logprobs: list[float | None]
    texts: list[str]

    @property
    def nll(self) -> float:
        """Negative log-likelihood of tokens 1.. (nats)."""
        return -sum(lp for lp in self.logprobs[1:])

    @property
    def perplexity(self) -> float:
        n = len(self.logprobs) - 1
        return math.exp(self.nll / n) if n else float("nan")
