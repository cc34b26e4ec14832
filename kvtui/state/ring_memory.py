"""What a request's sliding-window rings hold vs what full attention would hold on the same layers (torch-free).

A window layer keeps at most S + W positions (sinks + window) in a ring, however long the request runs; with full
attention the same layer would keep every position. Below W tokens the two are equal; past it the ring stays flat
while full attention keeps growing: that gap is what the hybrid model saves.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RingMemory:
    # positions whose K/V exist (computed so far)
    context: int
    window_layers: int
    full_layers: int
    # K/V the rings hold now: each window layer min(context, S + W) positions
    ring_bytes: int
    # bytes the rings reserve: S + W slots per window layer
    ring_capacity: int
    # K/V the same window layers would hold with full attention: context positions each
    full_bytes: int
    # K/V of the full-attention layers (in the paged pool): context positions each
    paged_bytes: int

    @property
    def saved(self) -> int:
        return self.full_bytes - self.ring_bytes


def ring_memory(header: dict, context: int) -> RingMemory | None:
    """From the trace header's model shape; None when the model has no window layers."""
    model = header.get("model") or {}
    windows = model.get("windows") or []
    window_sizes = [w for w in windows if w]
    if not window_sizes:
        return None
    per_token = (
        2
        * int(model.get("kv_heads") or 0)
        * int(model.get("head_dim") or 0)
        * int(model.get("elem_bytes") or 0)
    )
    sinks = int(model.get("sink_tokens") or 0)
    full = len(windows) - len(window_sizes)
    return RingMemory(
        context=context,
        window_layers=len(window_sizes),
        full_layers=full,
        ring_bytes=sum(min(context, sinks + w) for w in window_sizes) * per_token,
        ring_capacity=sum(sinks + w for w in window_sizes) * per_token,
        full_bytes=len(window_sizes) * context * per_token,
        paged_bytes=full * context * per_token,
    )
