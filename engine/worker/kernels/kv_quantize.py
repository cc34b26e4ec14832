"""The C writer of quantized K/V rows (kv_quantize.c) as torch calls: CPU, float32 rows into the paged pool or a
window layer's ring (uint8), the same bits as engine/worker/kv_quant.py's torch quantizer
(tests/engine/worker/test_kv_quant.py checks both). Where it cannot be built, `available()` is False and the
writes go through torch."""

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
    # x, N, H, D, stride_n, stride_h, slot_of, pool, slots, slot_stride, head_stride, kind
    argtypes = [_pointer] + [_long] * 5 + [_pointer, _pointer] + [_long] * 3 + [_int]
    return bind("quantize_write", argtypes, "kv_quantize")


def available() -> bool:
    return _kernel() is not None


def why_not() -> str:
    """Why the kernel is not available here ('' when it is)."""
    return "" if available() else build.why_not.get("kv_quantize", "")


def quantize_write(rows: torch.Tensor, slot_of: torch.Tensor, pool: torch.Tensor, kv_dtype: str) -> None:
    """rows [H, N, D] float32 (any strides but a contiguous last dimension) quantized into the paged pool's
    [H, slots, D + 4] uint8 at slots slot_of [N] (int64)."""
    heads, n, dim = rows.shape
    if pool.shape[0] != heads or pool.shape[2] != dim + 4:
        raise ValueError(f"pool must be [{heads}, slots, {dim + 4}]")
    _write(rows.transpose(0, 1), slot_of, pool, pool.shape[1], 1, pool.shape[1], kv_dtype)


def quantize_write_ring(rows: torch.Tensor, slot_of: torch.Tensor, ring: torch.Tensor, kv_dtype: str) -> None:
    """rows [N, H, D] float32 into a ring's [ring rows, S + W, H, D + 4] uint8 at flat slots slot_of [N]
    (ring row x (S + W) + slot)."""
    n, heads, dim = rows.shape
    if ring.shape[2] != heads or ring.shape[3] != dim + 4:
        raise ValueError(f"ring must be [rows, slots, {heads}, {dim + 4}]")
    _write(rows, slot_of, ring, ring.shape[0] * ring.shape[1], heads, 1, kv_dtype)


def _write(rows, slot_of, pool, slots: int, slot_stride: int, head_stride: int, kv_dtype: str) -> None:
    """rows [N, H, D]; strides in rows of the pool."""
    n, heads, dim = rows.shape
    if rows.dtype != torch.float32 or pool.dtype != torch.uint8 or rows.device.type != "cpu":
        raise ValueError("quantize_write takes float32 CPU rows and a uint8 CPU pool")
    if rows.stride(2) != 1 or not pool.is_contiguous() or pool.device.type != "cpu":
        raise ValueError("quantize_write needs rows contiguous in their last dimension and a contiguous pool")
    if slot_of.shape != (n,):
        raise ValueError(f"slot_of must be [{n}]")
    slot_of = slot_of.to(torch.int64).contiguous()
    refused = _kernel()(
        rows.data_ptr(),
        n,
        heads,
        dim,
        rows.stride(0),
        rows.stride(1),
        slot_of.data_ptr(),
        pool.data_ptr(),
        slots,
        slot_stride,
        head_stride,
        KINDS[kv_dtype],
    )
    if refused:
        raise ValueError(f"quantize_write: a slot outside the pool's {slots}")
