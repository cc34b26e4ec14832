"""The K/V tensors of the block pool: one slab per full-attention layer, KV heads only (never repeated).

Layout: `kv[layer_slot, 0 or 1, slot, kv_head, head_dim]` where slot = physical block x block_size + offset.
Its size is exactly 2 x paged layers x kv_heads x head_dim x elem_bytes x block_size x num_blocks.
"""

from __future__ import annotations

import torch

from engine.model import ModelShape


class PagedKV:
    def __init__(self, shape: ModelShape, num_blocks: int, block_size: int, dtype: torch.dtype,
                 device: torch.device):
        self.block_size = block_size
        self.num_blocks = num_blocks
        # full-attention layer index -> row in the slab; window layers keep their K/V elsewhere (rings)
        self.layer_slot = {layer: i for i, layer in enumerate(shape.paged_layers)}
        self.kv = torch.zeros(len(self.layer_slot), 2, num_blocks * block_size, shape.kv_heads, shape.head_dim,
                              dtype=dtype, device=device)

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()

    def keys(self, layer: int) -> torch.Tensor:
        return self.kv[self.layer_slot[layer], 0]

    def values(self, layer: int) -> torch.Tensor:
        return self.kv[self.layer_slot[layer], 1]

    def copy_block(self, src: int, dst: int, num_tokens: int) -> None:
        """Copy-on-write: the first `num_tokens` slots of block src into block dst, in every layer."""
        s, d = src * self.block_size, dst * self.block_size
        self.kv[:, :, d:d + num_tokens] = self.kv[:, :, s:s + num_tokens]

    def slots(self, table: list[int], start: int, end: int) -> torch.Tensor:
        """Slot index of positions [start, end) of a sequence whose block table is `table`."""
        positions = torch.arange(start, end)
        blocks = torch.tensor(table, dtype=torch.long)[positions // self.block_size]
        return (blocks * self.block_size + positions % self.block_size).to(self.kv.device)
