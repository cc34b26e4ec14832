"""The decode attention's two paths raced on the model's own shape (engine/worker/path_probe.py): the C kernel
reading each sequence's blocks in place (kernels/paged_decode.c) against the reference plan's path, the blocks
gathered and attended by SDPA (engine/worker/attention.py `_decode`).

The race is a decode step's attention of one layer for BATCH sequences of CONTEXT tokens, their blocks
scattered over the pool as a running engine's are, with float32 K/V (8-bit K/V costs SDPA's path a dequantize
more, so float32 is the race the kernel can lose).
"""

from __future__ import annotations

import torch

from engine.worker import path_probe
from engine.worker.kernels import build as kernels_build
from engine.worker.kernels import paged_decode
from engine.worker.sdpa import attend

BATCH = 8
CONTEXT = 512


def _race(kv_heads: int, groups: int, head_dim: int, block_size: int) -> tuple[float, float]:
    """(kernel's, SDPA's) seconds for one layer's decode attention of BATCH x CONTEXT."""
    generator = torch.Generator().manual_seed(0)
    width = -(-CONTEXT // block_size)
    blocks = BATCH * width
    slab = torch.randn(2, kv_heads, blocks * block_size, head_dim, generator=generator)
    tables = torch.randperm(blocks, generator=generator).view(BATCH, width)
    lengths = torch.full((BATCH,), CONTEXT)
    q = torch.randn(BATCH, kv_heads, groups, head_dim, generator=generator)
    scale = head_dim**-0.5
    keys, values = slab[0], slab[1]
    as_blocks = slab.view(2 * kv_heads, blocks, block_size * head_dim)
    query = q.view(BATCH, kv_heads * groups, 1, head_dim)

    def kernel():
        paged_decode.paged_decode(q, keys, values, tables, lengths, block_size, scale)

    def gathered():
        both = as_blocks[:, tables.reshape(-1)].view(2, kv_heads, BATCH, width * block_size, head_dim)
        both = both[:, :, :, :CONTEXT].transpose(1, 2)
        attend(query, both[0], both[1], None, scale, None)

    with torch.inference_mode():
        return path_probe.race(kernel, gathered)


def decide(kv_heads: int, groups: int, head_dim: int, block_size: int) -> path_probe.Decision:
    """Whether decode attention takes the C kernel for this shape on this machine."""
    shape = (kv_heads, groups, head_dim, block_size, BATCH, CONTEXT)
    build_id, threads = kernels_build.build_id("paged_decode"), torch.get_num_threads()

    def timings():
        return path_probe.cached_race("decode", build_id, shape, threads, lambda: _race(*shape[:4]))

    label = f"decode attention ({BATCH} x {CONTEXT} tokens, {kv_heads} KV heads x {groups}, {head_dim} wide)"
    return path_probe.decide(label, True, timings)
