"""Paged attention, plugged into transformers' attention interface so stock modeling code runs unchanged.

The model is called on a flattened batch (shape [1, T]) holding prefill chunks and decode tokens of many
requests. For every layer our function receives Q with all query heads and the new K/V with the KV heads
only. Full-attention layers write the new K/V into their slots in the pool, then for each request read that
request's history through its block table and attend: causal inside the chunk, the cached prefix fully visible;
decodes by the C kernel reading the pool in place where the run plan has it (engine/worker/run_plan.py), else by
SDPA over one gather of whole blocks.
Quantized K/V (EngineConfig.kv_dtype, engine/worker/kv_quant.py) are quantized as they are written and dequantized
where they are read: a gathered prefix, a gathered decode group, ring rows; a chunk attends to its own K/V
round-tripped, as a later step reads them; the C kernel reads the 8-bit rows itself.
Window layers (and every layer with attention sinks) keep K/V in per-request rings instead (ring_tensors.py):
O(W) memory, reading only the last W positions (the current token counts). KV heads are never repeated: SDPA's
GQA support (or grouped matmuls when the model soft-caps scores) lets each group of query heads read its KV head.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers import AttentionInterface

from engine.worker.batch import BATCH_KWARG, DecodeGroup, PagedBatch, PrefillSegment, RingBatch
from engine.worker.kernels import kv_quantize
from engine.worker.kernels.paged_decode import paged_decode
from engine.worker.sdpa import attend, chunk_over_prefix

ATTENTION_NAME = "kvtui_paged"


def _visible(query_pos: torch.Tensor, key_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """Which keys each query may read: causal, and within the last `window` positions (current one included)."""
    allowed = key_pos <= query_pos
    if window is not None:
        allowed &= key_pos > query_pos - window
    return allowed


def _context(blocks_view: torch.Tensor, blocks: torch.Tensor, length: int) -> torch.Tensor:
    """[1, Hkv, length, D]: the first `length` positions of a sequence from a layer's [Hkv, blocks, size, D], by
    one index_select of whole blocks."""
    hkv, _, _, dim = blocks_view.shape
    return blocks_view.index_select(1, blocks).view(hkv, -1, dim)[:, :length].unsqueeze(0)


def _prefill(
    batch: PagedBatch,
    seg: PrefillSegment,
    window: int | None,
    query,
    key,
    value,
    k_blocks,
    v_blocks,
    scaling,
    softcap,
) -> torch.Tensor:
    q = query[:, :, seg.q_start : seg.q_end]
    k_self, v_self = key[:, :, seg.q_start : seg.q_end], value[:, :, seg.q_start : seg.q_end]
    if window is None and seg.start == 0:
        return attend(q, k_self, v_self, None, scaling, softcap, causal=True)
    k_pre = batch.kv.dequantize(_context(k_blocks, seg.blocks, seg.start))
    v_pre = batch.kv.dequantize(_context(v_blocks, seg.blocks, seg.start))
    if window is None:
        return chunk_over_prefix(q, k_pre, v_pre, k_self, v_self, scaling, softcap)
    allowed = batch.masks.get((seg.q_start, window))
    if allowed is None:
        n = seg.q_end - seg.q_start
        query_pos = torch.arange(seg.start, seg.start + n, device=q.device)[:, None]
        key_pos = torch.arange(seg.start + n, device=q.device)[None, :]
        allowed = batch.masks[(seg.q_start, window)] = _visible(query_pos, key_pos, window)[None, None]
    k, v = torch.cat([k_pre, k_self], dim=2), torch.cat([v_pre, v_self], dim=2)
    return attend(q, k, v, allowed, scaling, softcap)


def read_in_place(
    batch: PagedBatch,
    group: DecodeGroup,
    layer: int,
    q: torch.Tensor,
    scale: float,
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """A decode group's attention by the C kernel over the pool in place, every call of it (the modules' and the
    fused step's): q [N, Hkv, G, D], each KV head's query heads -> [N, Hkv, G, D]."""
    quant = batch.kv.quant
    return paged_decode(
        q,
        batch.kv.keys(layer),
        batch.kv.values(layer),
        group.blocks,
        group.lengths,
        batch.kv.block_size,
        scale,
        window,
        softcap,
        kv_dtype=None if quant is None else quant.name,
    )


def _decode(
    batch: PagedBatch,
    group: DecodeGroup,
    layer: int,
    window: int | None,
    query,
    k_blocks,
    v_blocks,
    scaling,
    softcap,
) -> torch.Tensor:
    n, width = group.blocks.shape
    size = k_blocks.shape[2]
    length = group.longest if group.uniform else width * size
    # row: head_dim, or head_dim + 4 bytes of a quantized row
    hkv, row = k_blocks.shape[0], k_blocks.shape[3]
    # [N, Hq, 1, D] as [N, Hkv, Hq / Hkv, D]: each KV head's query heads are its queries (no repeat, no GQA path)
    q = query[0][:, group.q_index].transpose(0, 1).reshape(n, hkv, -1, query.shape[3])
    if group.lengths is not None:
        scale = scaling if scaling is not None else query.shape[3] ** -0.5
        out = read_in_place(batch, group, layer, q, scale, window, softcap)
        return out.reshape(n, query.shape[1], query.shape[3])
    # K and V of every block in one gather (advanced indexing runs on every thread; index_select on one):
    # [2 x Hkv, N x B, size x D] -> [N, Hkv, L, D] each
    both = batch.kv.layer_blocks(layer)[:, group.blocks.reshape(-1)]
    both = both.view(2, hkv, n, width * size, row)[:, :, :, :length].transpose(1, 2)
    both = batch.kv.dequantize(both)
    k, v = both[0], both[1]
    key = ("decode", id(group), window)
    if key not in batch.masks:
        if window is None and group.uniform:
            # every query sees its whole context and nothing is padding
            batch.masks[key] = None
        else:
            key_pos = torch.arange(length, device=q.device)[None, :]
            batch.masks[key] = _visible(group.positions[:, None], key_pos, window)[:, None, None, :]
    return attend(q, k, v, batch.masks[key], scaling, softcap).reshape(n, query.shape[1], query.shape[3])


def paged_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kwargs
):
    batch: PagedBatch | None = kwargs.get(BATCH_KWARG)
    if batch is None:
        raise RuntimeError(
            f"the {ATTENTION_NAME!r} attention runs only inside the engine's forward "
            f"(engine.worker.runner.ModelRunner), which passes {BATCH_KWARG}=..."
        )
    layer = module.layer_idx
    _check_layer(batch, layer, kwargs)
    if batch.rings is not None and layer in batch.rings.layer_group:
        return ring_attention(batch.rings, layer, query, key, value, scaling, softcap), None
    window = batch.windows[layer]
    # window_layout="paged": the layer's KV-cache group reads and writes through its own tables
    batch = batch.by_layer.get(layer, batch)
    k_cache, v_cache = batch.kv.keys(layer), batch.kv.values(layer)
    # query [1, Hq, T, D]; key/value [1, Hkv, T, D] -> the caches' [Hkv, slots, D] take [Hkv, T, D]
    quant = batch.kv.quant
    if quant is None:
        if not batch.read_only:
            k_cache[:, batch.write_slots] = key[0]
            v_cache[:, batch.write_slots] = value[0]
    elif not batch.prefills:
        # decodes only: the pool's writer (one C call on a float32 CPU)
        if not batch.read_only:
            batch.kv.write(layer, batch.write_slots, key[0], value[0])
    else:
        k_stored, v_stored = quant.quantize(key[0]), quant.quantize(value[0])
        if not batch.read_only:
            k_cache[:, batch.write_slots] = k_stored
            v_cache[:, batch.write_slots] = v_stored
        # a chunk attends to its own K/V as a later chunk reads them from the pool
        key, value = (
            quant.dequantize(k_stored, key.dtype)[None],
            quant.dequantize(v_stored, value.dtype)[None],
        )
    # dim: a row of the slab (head_dim, or head_dim + 4 bytes quantized)
    hkv, _, dim = k_cache.shape
    # [Hkv, blocks, block_size, D]
    k_blocks = k_cache.view(hkv, -1, batch.kv.block_size, dim)
    v_blocks = v_cache.view(hkv, -1, batch.kv.block_size, dim)
    # [T, Hq, D]
    out = query.new_empty(query.shape[2], query.shape[1], query.shape[3])
    for seg in batch.prefills:
        attended = _prefill(batch, seg, window, query, key, value, k_blocks, v_blocks, scaling, softcap)
        out[seg.q_start : seg.q_end] = attended[0].transpose(0, 1)
    for group in batch.decodes:
        out[group.q_index] = _decode(batch, group, layer, window, query, k_blocks, v_blocks, scaling, softcap)
    return out.unsqueeze(0), None


def _check_layer(batch: PagedBatch, layer: int, kwargs: dict) -> None:
    """Refuse what we would silently get wrong: a window the config reading missed, learned sinks (GPT-OSS)."""
    if kwargs.get("s_aux") is not None:
        raise NotImplementedError(
            "this model has learned attention sinks (s_aux); kvtui's attention does not apply them yet"
        )
    native = kwargs.get("sliding_window")
    if batch.forced_window is None and "sliding_window" in kwargs and native != batch.windows[layer]:
        raise ValueError(
            f"layer {layer}: the model attends through a window of {native} but kvtui read "
            f"{batch.windows[layer]} from its config (engine.models.shape.layer_windows); please report it"
        )


def ring_attention(rings: RingBatch, layer: int, query, key, value, scaling, softcap) -> torch.Tensor:
    """A window layer: prefill chunks read ring context + their own K/V, then write; decodes write, then read."""
    g, index = rings.layer_group[layer]
    plan, pool = rings.groups[g], rings.pools[g]
    # [rows, S+W, Hkv, D]
    k_ring, v_ring = pool[index, 0], pool[index, 1]
    # [T, Hkv, D]
    k_new, v_new = key[0].transpose(0, 1), value[0].transpose(0, 1)
    quant = rings.quant
    # what the ring reads back: [..., D] of the model's dtype
    read = (lambda rows: rows) if quant is None else (lambda rows: quant.dequantize(rows, key.dtype))
    # the rows as the ring stores them; a chunk attends to its own as a later step reads them back
    k_stored, v_stored = k_new, v_new
    if quant is not None and plan.segments:
        k_stored, v_stored = quant.quantize(k_new), quant.quantize(v_new)
        k_new, v_new = read(k_stored), read(v_stored)
    # [T, Hq, D]
    out = query.new_empty(query.shape[2], query.shape[1], query.shape[3])
    # read before any write: a long chunk overwrites slots its first queries read
    for seg in plan.segments:
        k = torch.cat([read(k_ring[seg.row, seg.context_slots]), k_new[seg.q_start : seg.q_end]])
        v = torch.cat([read(v_ring[seg.row, seg.context_slots]), v_new[seg.q_start : seg.q_end]])
        q = query[:, :, seg.q_start : seg.q_end]
        attended = attend(q, k.transpose(0, 1)[None], v.transpose(0, 1)[None], seg.mask, scaling, softcap)
        out[seg.q_start : seg.q_end] = attended[0].transpose(0, 1)
        # the ring as it stands at a snapshot boundary inside the chunk
        for _, buffer, slots, flat in seg.snapshots:
            buffer[index, 0], buffer[index, 1] = k_ring[seg.row], v_ring[seg.row]
            buffer[index, 0, slots], buffer[index, 1, slots] = k_stored[flat], v_stored[flat]
    if quant is not None and not plan.segments:
        _store_decodes(quant, k_ring, plan, k_new)
        _store_decodes(quant, v_ring, plan, v_new)
    else:
        k_ring[plan.write_rows, plan.write_slots] = k_stored[plan.write_flat]
        v_ring[plan.write_rows, plan.write_slots] = v_stored[plan.write_flat]
    if plan.decode_rows is not None:
        # [N, Hkv, S+W, D]
        k = read(k_ring[plan.decode_rows]).permute(0, 2, 1, 3)
        v = read(v_ring[plan.decode_rows]).permute(0, 2, 1, 3)
        # [N, Hq, 1, D]
        q = query[0][:, plan.decode_flat].transpose(0, 1).unsqueeze(2)
        out[plan.decode_flat] = attend(q, k, v, plan.decode_mask, scaling, softcap)[:, :, 0]
    return out.unsqueeze(0)


def _store_decodes(quant, ring: torch.Tensor, plan, rows: torch.Tensor) -> None:
    """A decode-only group's new rows [T, Hkv, D] into a quantized ring [ring rows, S+W, Hkv, D + 4]: one C call
    on a float32 CPU (torch's bits), else torch."""
    new = rows[plan.write_flat]
    if new.dtype == torch.float32 and ring.device.type == "cpu" and kv_quantize.available():
        slots = plan.write_rows * ring.shape[1] + plan.write_slots
        kv_quantize.quantize_write_ring(new, slots, ring, quant.name)
    else:
        ring[plan.write_rows, plan.write_slots] = quant.quantize(new)


AttentionInterface.register(ATTENTION_NAME, paged_attention)


class AttentionSwitch:
    """Our attention only during the engine's own forwards: between them the caller's model keeps its own
    implementation, so `model.generate(...)` after `Engine.from_model(model)` runs exactly as before.

    Swapping is a few attribute writes on the model's configs (set_attn_implementation validates and walks every
    submodule: done once here, not per step).
    """

    def __init__(self, model):
        stock = model.config._attn_implementation
        # refuses a model that cannot take it, now
        model.set_attn_implementation(ATTENTION_NAME)
        self.configs = list(
            {
                id(c): c
                for c in (getattr(m, "config", None) for m in model.modules())
                if getattr(c, "_attn_implementation", None) == ATTENTION_NAME
            }.values()
        )
        model.set_attn_implementation(stock)

    @contextmanager
    def paged(self):
        previous = [c._attn_implementation for c in self.configs]
        for config in self.configs:
            config._attn_implementation = ATTENTION_NAME
        try:
            yield
        finally:
            for config, implementation in zip(self.configs, previous):
                config._attn_implementation = implementation
