"""The C writer of quantized K/V rows (kv_quantize.c) as a torch call: CPU, float32 rows into a uint8 pool, the
same bits as engine/worker/kv_quant.py's torch quantizer (tests/engine/worker/test_kv_quant.py checks both).
Where it cannot be built, `available()` is False and the pool writes through torch."""

from __future__ import annotations

import ctypes
import functools

import torch

from engine.worker.kernels import build
from engine.worker.kernels.build import bind

_pointer, _long, _int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
# the C's code of each stored kind
KINDS = {"int8": 1, "fp8_e4m3": 2}


@functools.cache
def _kernel():
    # x, N, H, D, stride_n, stride_h, slot_of, pool, slots, kind
    return bind("quantize_write", [_pointer] + [_long] * 5 + [_pointer, _pointer, _long, _int], "kv_quantize")


def available() -> bool:
    return _kernel() is not None


def why_not() -> str:
    """Why the kernel is not available here ('' when it is)."""
    return "" if available() else build.why_not.get("kv_quantize", "")


def quantize_write(rows: torch.Tensor, slot_of: torch.Tensor, pool: torch.Tensor, kv_dtype: str) -> None:
    """rows [H, N, D] float32 (any strides but a contiguous last dimension) quantized into pool [H, slots, D + 4]
    uint8 at slots slot_of [N] (int64)."""
    heads, n, dim = rows.shape
    if rows.dtype != torch.float32 or pool.dtype != torch.uint8 or rows.device.type != "cpu":
        raise ValueError("quantize_write takes float32 CPU rows and a uint8 CPU pool")
    if rows.stride(2) != 1 or not pool.is_contiguous() or pool.device.type != "cpu":
        raise ValueError("quantize_write needs rows contiguous in their last dimension and a contiguous pool")
    if pool.shape[0] != heads or pool.shape[2] != dim + 4 or slot_of.shape != (n,):
        raise ValueError(f"pool must be [{heads}, slots, {dim + 4}] and slot_of [{n}]")
    slot_of = slot_of.to(torch.int64).contiguous()
    refused = _kernel()(
        rows.data_ptr(),
        n,
        heads,
        dim,
        rows.stride(1),
        rows.stride(0),
        slot_of.data_ptr(),
        pool.data_ptr(),
        pool.shape[1],
        KINDS[kv_dtype],
    )
    if refused:
        raise ValueError(f"quantize_write: a slot outside the pool's {pool.shape[1]}")
