"""The host tier's K/V: a second slab like the device pool's (engine/worker/paged_kv.py), in CPU memory.

The torch-free manager decides every move between the device and host (engine/core/tiers.py) and puts it on the
pool's copy list beside the copy-on-writes; `apply_copies` carries the whole list out, in order, before a
forward. On CUDA the host slab is pinned memory and the moves run on a side stream that first waits for the
device's work so far; the device then waits for the moves before its next kernel, so a block is never read before
it has arrived nor overwritten before it has left. On a CPU-only machine the same code copies between two slabs.
Whole rows are copied, scales of 8-bit K/V included: a loaded block is bit for bit the block that was offloaded.
"""

from __future__ import annotations

import torch

from engine.core.blocks import BlockCopy
from engine.worker.paged_kv import PagedKV


class HostKV:
    def __init__(self, device_kv: PagedKV, num_blocks: int):
        self.block_size = device_kv.block_size
        self.num_blocks = num_blocks
        layers, kv, heads, _, row = device_kv.kv.shape
        cuda = device_kv.kv.device.type == "cuda"
        self.kv = torch.zeros(
            layers,
            kv,
            heads,
            num_blocks * self.block_size,
            row,
            dtype=device_kv.kv.dtype,
            pin_memory=cuda,
        )
        self.stream = torch.cuda.Stream(device_kv.kv.device) if cuda else None

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()

    def move(self, device_kv: PagedKV, copy: BlockCopy) -> None:
        """One block between the device slab and this one (whole block: every slot, every layer)."""
        size = self.block_size
        s, d = copy.src * size, copy.dst * size
        if copy.dst_tier == "host":
            self.kv[:, :, :, d : d + size].copy_(device_kv.kv[:, :, :, s : s + size], non_blocking=True)
        else:
            device_kv.kv[:, :, :, d : d + size].copy_(self.kv[:, :, :, s : s + size], non_blocking=True)


def apply_copies(copies: list[BlockCopy], device_kv: PagedKV, host: HostKV | None) -> None:
    """The manager's copies since the last forward, in order: copy-on-writes on the device, moves to and from
    host (each run of moves on the host's side stream, fenced on both sides)."""
    i = 0
    while i < len(copies):
        copy = copies[i]
        if copy.src_tier == copy.dst_tier == "device":
            device_kv.copy_block(copy.src, copy.dst, copy.num_tokens)
            i += 1
            continue
        if host is None:
            raise RuntimeError(f"a move to or from the {copy.dst_tier} tier, but the engine has no host slab")
        j = i
        while j < len(copies) and not (copies[j].src_tier == copies[j].dst_tier == "device"):
            j += 1
        if host.stream is None:
            for move in copies[i:j]:
                host.move(device_kv, move)
        else:
            main = torch.cuda.current_stream(device_kv.kv.device)
            host.stream.wait_stream(main)
            with torch.cuda.stream(host.stream):
                for move in copies[i:j]:
                    host.move(device_kv, move)
            main.wait_stream(host.stream)
        i = j
