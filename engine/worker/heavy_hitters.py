"""Heavy hitters (H2O, Zhang et al. 2023) for the `kvtui sinks` experiment only: not a cache path of the engine.

H2O keeps, per KV head and per layer, a cache of at most B keys: the `recent` newest ones plus the ones with the
largest attention accumulated so far (heavy hitters); when a key must go, the one with the least accumulated
attention outside the recent window goes. Query t reads at most B keys, itself included: the same budget as
StreamingLLM's S sinks + (B - S) recent keys, and as a window of B.

It runs as one eager forward of the whole text: layer l's keys and queries depend only on layer l - 1's outputs,
so a mask per layer, built query by query from that layer's own scores, is exactly what a token-by-token H2O
decode would read (the scores of a KV head's query heads are summed, so GQA keeps one cache per KV head).
`HeavyHitterRun.kept` records what each cache holds after the last token (the strip `kvtui sinks` prints);
`history` what one layer's first KV head held as each traced query read it (`kvtui sinks --trace`'s
`ring_kept` events: the set changes over time, one drop a token once the budget is full).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import AttentionInterface

ATTENTION_NAME = "kvtui_h2o"


@dataclass
class HeavyHitterRun:
    """The budget of one run and what it kept: per layer, a [kv_heads, T] bool of the keys held at the end."""

    heavy: int
    recent: int
    kept: dict[int, torch.Tensor] = field(default_factory=dict)
    # the layer whose KV head 0 is traced, and the query positions at which its kept set is recorded
    trace_layer: int | None = None
    trace_at: tuple[int, ...] = ()
    # query position q -> the positions (<= q, sorted) that KV head 0 of trace_layer held when q read them
    history: dict[int, list[int]] = field(default_factory=dict)

    @property
    def budget(self) -> int:
        return self.heavy + self.recent


def heavy_hitter_mask(scores: torch.Tensor, heavy: int, recent: int) -> tuple[torch.Tensor, torch.Tensor]:
    """scores [Hkv, G, T, T] (scaled, unmasked) -> (allowed [Hkv, T, T], kept at the end [Hkv, T])."""
    hkv, _, length, _ = scores.shape
    budget = heavy + recent
    allowed = torch.zeros(hkv, length, length, dtype=torch.bool, device=scores.device)
    kept = torch.zeros(hkv, length, dtype=torch.bool, device=scores.device)
    accumulated = torch.zeros(hkv, length, dtype=torch.float32, device=scores.device)
    inf = torch.tensor(float("inf"), device=scores.device)
    heads = torch.arange(hkv, device=scores.device)
    for t in range(length):
        kept[:, t] = True
        allowed[:, t] = kept
        row = scores[:, :, t, : t + 1]
        if t > budget - 1:
            row = row.masked_fill(~kept[:, None, : t + 1], float("-inf"))
        accumulated[:, : t + 1] += torch.softmax(row.float(), dim=-1).sum(1)
        # the next query reads at most `budget` keys with itself: drop one now, outside its recent window
        outside = t + 2 - recent
        if t + 1 >= budget and outside > 0:
            candidates = torch.where(kept[:, :outside], accumulated[:, :outside], inf)
            kept[heads, candidates.argmin(-1)] = False
    return allowed, kept


def make_attention(run: HeavyHitterRun):
    """An attention function for transformers' interface that applies H2O's mask on every layer."""

    def attention(
        module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kwargs
    ):
        # query [1, Hq, T, D]; key/value [1, Hkv, T, D]
        _, hq, length, dim = query.shape
        hkv = key.shape[1]
        scale = scaling if scaling is not None else dim**-0.5
        grouped = query[0].view(hkv, hq // hkv, length, dim)
        scores = grouped @ key[0].unsqueeze(1).transpose(-1, -2) * scale
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        allowed, kept = heavy_hitter_mask(scores, run.heavy, run.recent)
        run.kept[module.layer_idx] = kept.cpu()
        if module.layer_idx == run.trace_layer and run.trace_at:
            # allowed[h, q] is what head h held when query q read (q included)
            rows = allowed[0, list(run.trace_at)].cpu()
            for q, row in zip(run.trace_at, rows):
                run.history[q] = row.nonzero()[:, 0].tolist()
        probs = torch.softmax(scores.masked_fill(~allowed[:, None], float("-inf")).float(), dim=-1)
        out = probs.to(value.dtype) @ value[0].unsqueeze(1)
        # [Hkv, G, T, D] -> [1, T, Hq, D]
        return out.reshape(hq, length, dim).transpose(0, 1).unsqueeze(0), None

    return attention


def next_token_logprobs(model, hidden: torch.Tensor, token_ids: list[int], rows: int = 256) -> torch.Tensor:
    """[T - 1] log-probability of tokens 1.. from the last hidden states [T, hidden], through the model's
    output head a few rows at a time (a 262k-token vocabulary makes whole-text logits gigabytes)."""
    head = model.get_output_embeddings()
    cap = getattr(model.config, "final_logit_softcapping", None)
    targets = torch.tensor(token_ids[1:], device=hidden.device)
    out = []
    for i in range(0, len(token_ids) - 1, rows):
        logits = head(hidden[i : min(i + rows, len(token_ids) - 1)]).float()
        if cap:
            logits = torch.tanh(logits / cap) * cap
        target = targets[i : i + logits.shape[0], None]
        out.append(logits.gather(1, target)[:, 0] - torch.logsumexp(logits, dim=-1))
    return torch.cat(out)


@torch.inference_mode()
def heavy_hitter_logprobs(
    model, token_ids: list[int], heavy: int, recent: int, trace_layer: int | None = None, trace_at=()
) -> tuple[torch.Tensor, HeavyHitterRun]:
    """[T - 1] log-probabilities of tokens 1.. under H2O with at most heavy + recent keys per KV head; with
    `trace_layer`, the run's `history` holds that layer's KV head 0 kept set at each query of `trace_at`."""
    run = HeavyHitterRun(heavy, recent, trace_layer=trace_layer, trace_at=tuple(trace_at))
    AttentionInterface.register(ATTENTION_NAME, make_attention(run))
    previous = model.config._attn_implementation
    model.set_attn_implementation(ATTENTION_NAME)
    try:
        device = next(model.parameters()).device
        ids = torch.tensor([token_ids], device=device)
        hidden = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state[0]
    finally:
        model.set_attn_implementation(previous)
    return next_token_logprobs(model, hidden, token_ids), run
