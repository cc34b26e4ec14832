"""The C product of a few rows by a weight matrix (small_linear.c) as a torch call: CPU, float32.

A decode step multiplies one row per sequence by every weight. small_linear.c streams each weight once, in
panels of 16 outputs repacked here (`pack`), and does every row's work on it while it is in a register. On a
2-core AMD EPYC, SmolLM2's weights (538 MB) took 14.7-14.8 ms for one row against oneDNN's 17.8-18.9, and
22.2-22.7 against 24.7-25.7 ms for 8 rows (one thread; 10.8-12.6 against 12.4-16.2 and 14.4-15.0 against
17.5-18.9 with two). Past 8 rows oneDNN is faster (16 rows: 64 against 37 ms): MAX_ROWS.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from engine.worker.kernels.build import bind

# rows up to which the kernel beats oneDNN's packed product (measured; engine/worker/packed_linear.py)
MAX_ROWS = 8
LANES = 16


@functools.cache
def _kernel():
    # x, M, K, packed, N, bias, y, threads
    pointer, long = ctypes.c_void_p, ctypes.c_int64
    return bind("small_linear", [pointer, ctypes.c_int, long, pointer, long, pointer, pointer, ctypes.c_int])


def available() -> bool:
    return _kernel() is not None


def pack(weight: torch.Tensor) -> torch.Tensor:
    """[N, K] -> [ceil(N / 16), K, 16] panels of 16 outputs (the last padded with zeros)."""
    n, k = weight.shape
    padded = -(-n // LANES) * LANES
    full = weight.new_zeros(padded, k)
    full[:n] = weight
    return full.view(padded // LANES, LANES, k).transpose(1, 2).contiguous()


def small_linear(x: torch.Tensor, panels: torch.Tensor, out_features: int, bias: torch.Tensor | None):
    """x [..., K] with at most MAX_ROWS rows in all -> [..., out_features] = x W^T + bias."""
    k = x.shape[-1]
    flat = x.reshape(-1, k).contiguous()
    rows = flat.shape[0]
    y = flat.new_empty(rows, out_features)
    refused = _kernel()(
        flat.data_ptr(),
        rows,
        k,
        panels.data_ptr(),
        out_features,
        None if bias is None else bias.data_ptr(),
        y.data_ptr(),
        torch.get_num_threads(),
    )
    if refused:
        raise ValueError(f"small_linear takes 1..16 rows, got {rows}")
    return y.view(*x.shape[:-1], out_features)
