"""The C small operations of a decoder layer (decode_ops.c) as torch calls: CPU, float32, torch's own bits.

`add_rms_norm` is a residual add and an RMSNorm in one pass; `rope_write` the rotary embedding of a decode
step's queries and keys with the keys and values written into the paged pool; `rope` the rotary embedding of a
prefill's rows. engine/worker/fused_forward.py strings them together with the linear and attention kernels. The
tensors' layout is checked here (the C reads raw memory); the values' equality with transformers' modules is
checked by fused_forward at load (the norm) and by tests/engine/worker/test_fused_forward.py.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from engine.worker.kernels import build
from engine.worker.kernels.build import bind

_pointer, _long, _int, _float = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float


@functools.cache
def _norm():
    # h, delta, M, H, weight, eps, out, threads
    argtypes = [_pointer, _pointer, _long, _long, _pointer, _float, _pointer, _int]
    return bind("add_rms_norm", argtypes, "decode_ops")


@functools.cache
def _rope_write():
    # q, k, v, N, Hq, Hkv, D, cos, sin, keys, values, slots, slots_of, q_out
    argtypes = [_pointer] * 3 + [_long] * 4 + [_pointer] * 4 + [_long, _pointer, _pointer]
    return bind("rope_write", argtypes, "decode_ops")


@functools.cache
def _rope():
    # q, k, T, Hq, Hkv, D, cos, sin, q_out, k_out, threads
    return bind("rope", [_pointer] * 2 + [_long] * 4 + [_pointer] * 4 + [_int], "decode_ops")


def available() -> bool:
    return _norm() is not None and _rope_write() is not None and _rope() is not None


def why_not() -> str:
    """Why the kernel is not available here ('' when it is)."""
    return "" if available() else build.why_not.get("decode_ops", "")


def _check(*tensors: torch.Tensor) -> None:
    for t in tensors:
        if t.dtype != torch.float32 or t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError("decode_ops takes contiguous float32 CPU tensors")


def _refuse_overlap(out: torch.Tensor, x: torch.Tensor) -> None:
    start, end = out.data_ptr(), out.data_ptr() + out.numel() * out.element_size()
    if start < x.data_ptr() + x.numel() * x.element_size() and x.data_ptr() < end:
        raise ValueError("decode_ops: the output overlaps the input")


def add_rms_norm(
    h: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float, out: torch.Tensor
) -> torch.Tensor:
    """h [M, H] += delta (in place, when given); out [M, H] = RMSNorm(h) with `weight` and `eps`, as
    transformers' LlamaRMSNorm computes it. Returns out."""
    _check(h, weight, out, *(() if delta is None else (delta,)))
    rows, width = h.shape
    if out.shape != h.shape or weight.shape != (width,) or (delta is not None and delta.numel() != h.numel()):
        raise ValueError(
            f"add_rms_norm: h {tuple(h.shape)}, out {tuple(out.shape)}, weight {tuple(weight.shape)}"
        )
    refused = _norm()(
        h.data_ptr(),
        None if delta is None else delta.data_ptr(),
        rows,
        width,
        weight.data_ptr(),
        eps,
        out.data_ptr(),
        torch.get_num_threads(),
    )
    if refused:
        raise ValueError(f"add_rms_norm: rows of {width} are narrower than torch's sum kernel's vectors")
    return out


def rope_write(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    slots_of: torch.Tensor,
    q_out: torch.Tensor,
) -> torch.Tensor:
    """q [N, Hq, D], k / v [N, Hkv, D], cos / sin [N, D]: q_out [N, Hq, D] the rotated queries; the rotated
    keys and the values written to slots `slots_of` [N] (int64) of keys / values [Hkv, slots, D]. Returns q_out."""
    _check(q, k, v, cos, sin, keys, values, q_out)
    # the C reads a head's first half after writing its second: the output must be memory of its own
    _refuse_overlap(q_out, q)
    n, heads, dim = q.shape
    kv_heads = k.shape[1]
    if (
        k.shape != (n, kv_heads, dim)
        or v.shape != k.shape
        or cos.shape != (n, dim)
        or sin.shape != cos.shape
        or keys.shape != values.shape
        or keys.shape[0] != kv_heads
        or keys.shape[2] != dim
        or q_out.shape != q.shape
        or slots_of.shape != (n,)
        or slots_of.dtype != torch.int64
        or slots_of.device.type != "cpu"
    ):
        raise ValueError("rope_write: shapes do not agree")
    # a name for the copy: a temporary's memory would be freed before the C reads it
    slots_of = slots_of.contiguous()
    refused = _rope_write()(
        q.data_ptr(),
        k.data_ptr(),
        v.data_ptr(),
        n,
        heads,
        kv_heads,
        dim,
        cos.data_ptr(),
        sin.data_ptr(),
        keys.data_ptr(),
        values.data_ptr(),
        keys.shape[1],
        slots_of.data_ptr(),
        q_out.data_ptr(),
    )
    if refused == 1:
        raise ValueError(f"rope_write: a slot outside the pool's {keys.shape[1]}")
    if refused:
        raise ValueError(f"rope_write: an odd head dimension ({dim})")
    return q_out


def rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [T, Hq, D], k [T, Hkv, D], cos / sin [T, D] -> (q, k) rotated, as transformers' apply_rotary_pos_emb."""
    _check(q, k, cos, sin)
    rows, heads, dim = q.shape
    if k.shape[0] != rows or k.shape[2] != dim or cos.shape != (rows, dim) or sin.shape != cos.shape:
        raise ValueError("rope: shapes do not agree")
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    refused = _rope()(
        q.data_ptr(),
        k.data_ptr(),
        rows,
        heads,
        k.shape[1],
        dim,
        cos.data_ptr(),
        sin.data_ptr(),
        q_out.data_ptr(),
        k_out.data_ptr(),
        torch.get_num_threads(),
    )
    if refused:
        raise ValueError(f"rope: an odd head dimension ({dim})")
    return q_out, k_out
