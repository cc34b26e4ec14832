"""The K/V tensors of the block pool: one slab per full-attention layer (per layer of a KV-cache group, with
window_layout="paged"), KV heads only (never repeated).

Layout: `kv[layer_slot, 0 or 1, kv_head, slot, head_dim]` where slot = physical block x block_size + offset:
each head's positions are rows of one matrix, so a sequence's context is [kv_heads, L, head_dim] as attention
reads it (the C decode kernel in place, SDPA after one gather of whole blocks).
Its size is exactly 2 x paged layers x kv_heads x head_dim x elem_bytes x block_size x num_blocks.
Quantized K/V (kv_dtype, engine/worker/kv_quant.py): the slab is uint8 and a slot's row is head_dim bytes and
its float32 scale, `kv[layer_slot, 0 or 1, kv_head, slot, head_dim + 4]`; `write` quantizes, `dequantize` reads.
"""

from __future__ import annotations

import torch

from engine.models.kv_groups import KVGroup, layers_per_block
from engine.models.shape import ModelShape
from engine.worker.kernels import kv_quantize
from engine.worker.kv_quant import quantizer


class PagedKV:
    def __init__(
        self,
        shape: ModelShape,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device,
        kv_dtype: str | None = None,
        groups: list[KVGroup] | None = None,
    ):
        """`groups`: window_layout="paged" (engine/models/kv_groups.py): every layer pages its K/V, and a block
        holds the largest group's layers, so layer i of a group is row i of the slab whichever block it reads."""
        self.shape = shape
        self.block_size = block_size
        self.num_blocks = num_blocks
        # what attention computes in (the model's dtype); the slab holds that, or quantized rows
        self.dtype = dtype
        self.quant = quantizer(kv_dtype)
        row = shape.head_dim if self.quant is None else self.quant.row_width(shape.head_dim)
        # full-attention layer index -> row in the slab; window layers keep their K/V elsewhere (rings)
        self.layer_slot = {layer: i for i, layer in enumerate(shape.paged_layers)}
        rows = len(self.layer_slot)
        if groups is not None:
            self.layer_slot = {layer: i for group in groups for i, layer in enumerate(group.layers)}
            rows = layers_per_block(groups)
        self.kv = torch.zeros(
            rows,
            2,
            shape.kv_heads,
            num_blocks * block_size,
            row,
            dtype=dtype if self.quant is None else torch.uint8,
            device=device,
        )
        self._views = {layer: (self.kv[i, 0], self.kv[i, 1]) for layer, i in self.layer_slot.items()}
        self._c_writes = self.quant is not None and device.type == "cpu" and kv_quantize.available()

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()

    def keys(self, layer: int) -> torch.Tensor:
        return self._views[layer][0]

    def values(self, layer: int) -> torch.Tensor:
        return self._views[layer][1]

    def write(self, layer: int, slots: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        """K/V [Hkv, T, D] of T new positions into `slots` of a layer (quantized where the pool is: by the C
        writer on a float32 CPU, torch's bits in one call, else by torch)."""
        keys, values = self._views[layer]
        if self.quant is None:
            keys[:, slots], values[:, slots] = key, value
        elif self._c_writes and key.dtype == torch.float32 and key.stride(2) == value.stride(2) == 1:
            kv_quantize.quantize_write(key, slots, keys, self.quant.name)
            kv_quantize.quantize_write(value, slots, values, self.quant.name)
        else:
            keys[:, slots], values[:, slots] = self.quant.quantize(key), self.quant.quantize(value)

    def dequantize(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows read from the slab as attention takes them: [..., D] of the model's dtype."""
        return rows if self.quant is None else self.quant.dequantize(rows, self.dtype)

    def layer_blocks(self, layer: int) -> torch.Tensor:
        """[2 x kv_heads, blocks, block_size x head_dim]: a layer's keys then values, one row of a block per head,
        so one gather of block ids reads both."""
        heads, _, dim = self._views[layer][0].shape
        return self.kv[self.layer_slot[layer]].view(2 * heads, self.num_blocks, self.block_size * dim)

    def copy_block(self, src: int, dst: int, num_tokens: int) -> None:
        """Copy-on-write: the first `num_tokens` slots of block src into block dst, in every layer."""
        s, d = src * self.block_size, dst * self.block_size
        self.kv[:, :, :, d : d + num_tokens] = self.kv[:, :, :, s : s + num_tokens]

    def slots_of(self, table: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """Slot index of positions [start, end) of a sequence whose block table (a tensor on the slab's device)
        is `table`."""
        positions = torch.arange(start, end, device=table.device)
        return table[positions // self.block_size] * self.block_size + positions % self.block_size


class BlockTables:
    """Each scheduled request's block table as a tensor on the device, kept between steps.

    The block table itself is a Python list that the KV-cache manager edits (appends as the sequence grows,
    a copy-on-write replaces an entry, an edit or a preemption cuts it). Each step compares the list with the
    copy taken when the tensor was made, a C-speed list comparison: unchanged, the tensor is reused; grown
    only, the new blocks are written after the old ones (the buffer doubles when full); anything else, the
    tensor is made again. So a decode never turns its whole table into a tensor again.
    """

    def __init__(self, device: torch.device):
        self.device = device
        # request id -> (table copy, buffer)
        self.known: dict[str, tuple[list[int], torch.Tensor]] = {}

    def get(self, request, table: list[int] | None = None) -> torch.Tensor:
        """The request's block table as a tensor (`table`: another table of it, a KV-cache group's)."""
        table = request.block_table if table is None else table
        return self._buffer(request, table)[: len(table)]

    def _buffer(self, request, table: list[int]) -> torch.Tensor:
        entry = self.known.get(request.request_id)
        if entry is not None:
            copy, buffer = entry
            if len(table) == len(copy) and table == copy:
                return buffer
            if len(table) > len(copy) and table[: len(copy)] == copy:
                if len(table) > buffer.shape[0]:
                    bigger = torch.empty(2 * len(table), dtype=torch.long, device=self.device)
                    bigger[: len(copy)] = buffer[: len(copy)]
                    buffer = bigger
                new = table[len(copy) :]
                buffer[len(copy) : len(table)] = torch.tensor(new, dtype=torch.long, device=self.device)
                self.known[request.request_id] = (list(table), buffer)
                return buffer
        buffer = torch.empty(max(2 * len(table), 8), dtype=torch.long, device=self.device)
        buffer[: len(table)] = torch.tensor(table, dtype=torch.long, device=self.device)
        self.known[request.request_id] = (list(table), buffer)
        return buffer

    def keep_only(self, request_ids) -> None:
        """Forget requests that are not in this step, once the store holds many more than the step has."""
        ids = set(request_ids)
        if len(self.known) > 2 * len(ids) + 16:
            self.known = {rid: entry for rid, entry in self.known.items() if rid in ids}
