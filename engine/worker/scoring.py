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
own (a ring restored from a snapshot holds only the last W positions), freed afterwards; with
window_layout="paged" (whose window groups may hold only the window before the hit) the span runs from 0 as one
chunk, which reads nothing from the pool. The probe emits no
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


class PromptLogprobs:
    """The engine's store of prompt log-probabilities: request id -> [None, lp(token 1), lp(token 2), ...]."""

    def __init__(self):
        self.by_request: dict[str, list[float | None]] = {}

    def get(self, request_id: str) -> list[float | None]:
        return list(self.by_request.get(request_id, [None]))

    def before_step(self, chunks, runner) -> None:
        """A scored chunk that starts after positions nobody scored for it (a prefix hit, an edit, a fork):
        compute their log-probabilities first, writing nothing the cache holds (ModelRunner.score_span)."""
        for chunk in chunks:
            req = chunk.request
            if not req.params.prompt_logprobs:
                continue
            scored = self.by_request.get(req.request_id)
            if scored is None:
                parent = self.by_request.get(req.parent_id) if req.parent_id else None
                scored = self.by_request[req.request_id] = list(parent) if parent else [None]
            # the chunk's first row gives token start + 1: tokens up to `start` must be known already
            need = min(chunk.start, len(req.prompt_token_ids) - 1)
            if len(scored) - 1 < need:
                first = len(scored) - 1
                self._store(req.request_id, first + 1, runner.score_span(req, first, need))

    def after_step(self, chunks, computed: dict[int, torch.Tensor]) -> None:
        """Keep what the step's scored chunks computed (StepResult.prompt_logprobs)."""
        for index, logprobs in computed.items():
            self._store(chunks[index].request.request_id, chunks[index].start + 1, logprobs)

    def cut(self, request_id: str, position: int) -> None:
        """An edit at `position`: tokens from there on changed, and their log-probabilities with them."""
        scored = self.by_request.get(request_id)
        if scored is not None:
            del scored[max(1, position) :]

    def _store(self, request_id: str, position: int, logprobs: torch.Tensor) -> None:
        """Log-probabilities of the prompt tokens from `position` on (a recomputation overwrites)."""
        scored = self.by_request.setdefault(request_id, [None])
        values = logprobs.tolist()
        scored[position : position + len(values)] = values
