"""Attention sinks (StreamingLLM) change the model's answer: measure by how much, for the trace.

`EngineConfig(sink_tokens=S, window=W)` makes every layer keep the first S and the last W positions in its ring
(ring_tensors.py). At a request's finish we compare the logits of its sequence under that mask with a no-cache
full-attention forward. Ours are recomputed in one prefill rather than kept per step (a vocabulary-wide row
per generated token would grow without bound); every layer is a ring layer in this mode, so that prefill needs
no block table.
"""

from __future__ import annotations

import torch

from engine.core.request import Request, SamplingParams
from engine.core.scheduler import ScheduledChunk
from engine.worker.batch import BATCH_KWARG


@torch.inference_mode()
def sink_divergence(request: Request, runner, rings) -> dict:
    """Fields of the `sink_divergence` event: max |logit diff| over the rows that chose generated tokens."""
    # the last token's logits chose nothing yet
    tokens = request.tokens[:-1]
    probe = Request(f"{request.request_id}#sink-check", tokens, SamplingParams(), 0.0)
    model = runner.model
    ids, pos, batch = runner.build_batch([ScheduledChunk(probe, 0, len(tokens))])
    try:
        with runner.attention.paged():
            ours = model(input_ids=ids, position_ids=pos, use_cache=False, **{BATCH_KWARG: batch}).logits[0]
    finally:
        rings.free(probe.request_id)
    # the model's own attention: the engine's is on only in forwards
    full = model(ids, use_cache=False).logits[0]
    first = len(request.prompt_token_ids) - 1
    ours, full = ours[first:].float(), full[first:].float()
    return dict(
        request_id=request.request_id,
        max_logit_diff=round((ours - full).abs().max().item(), 6),
        positions=list(range(first, len(tokens))),
        sink_tokens=rings.sinks,
        window=rings.shape.forced_window,
        argmax_changed=int((ours.argmax(-1) != full.argmax(-1)).sum().item()),
    )
