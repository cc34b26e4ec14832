"""What one flattened forward needs besides the tokens: where each token's K/V goes and what each query reads.

The runner (engine/worker/runner.py) builds these; the attention functions (engine/worker/attention.py) read them. They live
apart from both so that neither the rings nor the sinks check imports the attention module.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.worker.kv_quant import KVQuantizer
from engine.worker.paged_kv import PagedKV

# the keyword that carries a PagedBatch through model(...) to our attention
BATCH_KWARG = "kvtui_batch"


@dataclass
class PrefillSegment:
    """Queries [q_start, q_end) of the flat batch are positions [start, start + n) of one sequence."""

    q_start: int
    q_end: int
    start: int
    # [ceil(end / block_size)] the sequence's physical blocks up to the chunk's end
    blocks: torch.Tensor


@dataclass
class DecodeGroup:
    """One query token per sequence; a group runs in one attention call over its blocks: the C kernel reads them
    in place (one group for the step), SDPA pads a group to its longest (the runner groups decodes of similar
    context lengths)."""

    # [N] rows of the flat batch
    q_index: torch.Tensor
    # [N] position of each query token
    positions: torch.Tensor
    # [N, B_max] physical blocks of each sequence (padding repeats block 0)
    blocks: torch.Tensor
    # the longest context (max position + 1)
    longest: int
    # all contexts have the same length (no padding to mask)
    uniform: bool = False
    # [N] positions each query reads (its own included), set when the C kernel reads the group in place
    # (engine/worker/kernels/paged_decode.c): then nothing else above is needed but blocks
    lengths: torch.Tensor | None = None


@dataclass
class RingSegment:
    """A prefill chunk of one request in one ring group: queries [q_start, q_end) of the flat batch."""

    q_start: int
    q_end: int
    row: int
    # [c] physical slots of the positions it reads from the ring (sinks first)
    context_slots: torch.Tensor
    # [1, 1, n, c + n] over ring context + the chunk's own keys
    mask: torch.Tensor
    # (boundary, buffer [L_g, 2, S+W, H, D], slots, flat rows): the ring as it is at a boundary inside the chunk
    snapshots: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=list)


@dataclass
class RingGroupBatch:
    segments: list[RingSegment] = field(default_factory=list)
    # every new position that lands in a slot: row, slot, flat row
    write_rows: torch.Tensor | None = None
    write_slots: torch.Tensor | None = None
    write_flat: torch.Tensor | None = None
    # [N]
    decode_rows: torch.Tensor | None = None
    # [N] query rows of the flat batch
    decode_flat: torch.Tensor | None = None
    # [N, 1, 1, S+W] or None when every slot is inside every window
    decode_mask: torch.Tensor | None = None


@dataclass
class RingBatch:
    """The ring tensors (engine/worker/ring_tensors.py) and what each group reads and writes in one forward."""

    # ring layer -> (group, index in the group)
    layer_group: dict[int, tuple[int, int]]
    # per group: [layers in group, 2, rows, S + W, kv_heads, head_dim] (quantized: head_dim + 4 uint8)
    pools: list[torch.Tensor]
    groups: list[RingGroupBatch]
    # quantized K/V (engine/worker/kv_quant.py), or None
    quant: KVQuantizer | None = None


@dataclass
class PagedBatch:
    """Everything one forward's attention reads: the pool slab, the segments, the masks, the rings."""

    kv: PagedKV
    windows: tuple[int | None, ...]
    # [T] slot of each token of the flat batch (None: no paged layer)
    write_slots: torch.Tensor | None
    prefills: list[PrefillSegment] = field(default_factory=list)
    # decode tokens, grouped by context length
    decodes: list[DecodeGroup] = field(default_factory=list)
    # (segment or "decode", window) -> mask, built once per forward
    masks: dict = field(default_factory=dict)
    # window layers: their rings and what each request reads and writes there
    rings: RingBatch | None = None
    # EngineConfig(window=W): windows differ from the model's on purpose
    forced_window: int | None = None
    # a scoring probe (ModelRunner.score_span): attention reads the pool but writes nothing into it
    read_only: bool = False
    # window_layout="paged": layer -> the batch of its KV-cache group (its tables), for the groups besides the
    # table group's
    by_layer: dict[int, PagedBatch] = field(default_factory=dict)
