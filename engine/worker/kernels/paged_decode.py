"""The C paged decode attention (paged_decode.c) as a torch call: CPU, float32, one query token per sequence.

It reads each sequence's K/V in place through its block table (no gather, no padding) and takes windows and
soft-capped scores as well, so a decode group is one call per layer whatever its blocks look like. Quantized K/V
(int8, fp8_e4m3 with a scale per row) it reads as they are stored: a quarter of float32's bytes, plus the scales. Where the
kernel cannot be built (engine/worker/kernels/build.py), `available()` is False and engine/worker/attention.py
keeps its torch path.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from engine.worker.kernels import build
from engine.worker.kernels.build import bind

_pointer, _long, _int, _float = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float


# paged_decode_8bit's code of each stored kind
_KINDS = {"int8": 1, "fp8_e4m3": 2}


@functools.cache
def _kernel():
    # q, keys, values, slots, tables, width, lengths, N, Hkv, G, D, block_size, scale, window, softcap,
    # threads, out
    argtypes = [_pointer, _pointer, _pointer, _long, _pointer, _long, _pointer]
    return bind("paged_decode", argtypes + [_int] * 5 + [_float, _long, _float, _int, _pointer])


@functools.cache
def _kernel_8bit():
    # q, keys, values, kind, slots, tables, width, lengths, N, Hkv, G, D, block_size, scale, window, softcap,
    # threads, out
    argtypes = [_pointer, _pointer, _pointer, _int, _long, _pointer, _long, _pointer]
    return bind(
        "paged_decode_8bit",
        argtypes + [_int] * 5 + [_float, _long, _float, _int, _pointer],
        kernel="paged_decode",
    )


def available() -> bool:
    return _kernel() is not None


def usable(device: torch.device, dtype: torch.dtype) -> bool:
    return device.type == "cpu" and dtype == torch.float32 and available()


def paged_decode(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    tables: torch.Tensor,
    lengths: torch.Tensor,
    block_size: int,
    scale: float,
    window: int | None = None,
    softcap: float | None = None,
    kv_dtype: str | None = None,
) -> torch.Tensor:
    """q [N, Hkv, G, D] (each KV head's query heads); keys / values [Hkv, slots, D] a layer's pool; tables [N, W]
    block ids (int64; a row may be longer than its sequence needs); lengths [N] positions each query reads, its
    own included -> [N, Hkv, G, D]. kv_dtype int8 | fp8_e4m3: keys / values are quantized rows, [Hkv, slots,
    D + 4] uint8 (engine/worker/kv_quant.py), dequantized as they are read."""
    if not available():
        raise RuntimeError("the paged decode kernel is not built here; check available() first")
    n, hkv, groups, dim = q.shape
    stored, row = (torch.float32, dim) if kv_dtype is None else (torch.uint8, dim + 4)
    # the C reads raw memory of these types: anything else would be read past its end
    if q.dtype != torch.float32 or any(t.dtype != stored for t in (keys, values)):
        kind = "float32" if kv_dtype is None else f"uint8 ({kv_dtype} rows and their scales)"
        raise ValueError(f"paged_decode takes float32 CPU queries and {kind} keys / values")
    if any(t.device.type != "cpu" for t in (q, keys, values)):
        raise ValueError("paged_decode takes CPU tensors")
    if keys.shape != values.shape or keys.shape[0] != hkv or keys.shape[2] != row:
        raise ValueError(f"keys / values must be [{hkv}, slots, {row}], got {tuple(keys.shape)}")
    if not (keys.is_contiguous() and values.is_contiguous()):
        raise ValueError("keys / values must be contiguous")
    if tables.dim() != 2 or tables.shape[0] != n or lengths.shape != (n,):
        raise ValueError(f"tables must be [{n}, width] and lengths [{n}]")
    if n == 0:
        return q.new_empty(q.shape)
    q = q.contiguous()
    tables = tables.to(torch.int64).contiguous()
    lengths = lengths.to(torch.int64).contiguous()
    out = torch.empty_like(q)
    pointers = (q.data_ptr(), keys.data_ptr(), values.data_ptr())
    if kv_dtype is None:
        kernel, head = _kernel(), pointers
    else:
        kernel, head = _kernel_8bit(), (*pointers, _KINDS[kv_dtype])
    refused = kernel(
        *head,
        keys.shape[1],
        tables.data_ptr(),
        tables.shape[1],
        lengths.data_ptr(),
        n,
        hkv,
        groups,
        dim,
        block_size,
        scale,
        window or 0,
        softcap or 0.0,
        torch.get_num_threads(),
        out.data_ptr(),
    )
    if refused == 3:
        raise MemoryError("paged_decode: no memory for its partial results")
    if refused == 4:
        raise ValueError(f"paged_decode: {kv_dtype!r} is no stored kind of the kernel's")
    if refused:
        raise ValueError(
            "paged_decode: "
            + (
                f"a length outside 1..{tables.shape[1] * block_size} (the table rows' {tables.shape[1]} blocks)"
                if refused == 1
                else f"a block id outside the pool's {keys.shape[1] // block_size} blocks"
            )
        )
    return out


def why_not() -> str:
    """Why the kernel is not available here ('' when it is)."""
    return "" if available() else build.why_not.get("paged_decode", "")
