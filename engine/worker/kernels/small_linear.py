"""The C product of a few rows by a weight matrix (small_linear.c) as a torch call: CPU, float32.

A decode step multiplies one row per sequence by every weight. small_linear.c streams each weight once, in
panels of 16 outputs repacked here (`pack`), and does every row's work on it while it is in a register; it sums
in blocks of 32 products, so its rounding stays near MKL's. On a 2-core AMD EPYC, SmolLM2's weights (538 MB)
took 15.5 ms for one row against oneDNN's 19.6, and 26-30 against 26-31 ms for 8 rows with one thread (12.5
against 15.6 and 16.0-17.1 against 17.6-19.1 with two).
"""

from __future__ import annotations

import ctypes
import functools

import torch

from engine.worker.kernels.build import bind

# rows of one pass: past 8 one pass runs out of registers (16 rows: 64 against oneDNN's 37 ms), two passes
# of 8 read the weights twice
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


def product(panels: torch.Tensor, out_features: int, bias: torch.Tensor | None):
    """x -> x W^T + bias for the weights packed in `panels`: the weights and bias checked once here, each call
    checks only x (a decode step makes one call per linear)."""
    if panels.dtype != torch.float32 or panels.device.type != "cpu":
        raise ValueError("small_linear takes float32 CPU tensors")
    if panels.dim() != 3 or panels.shape[0] * LANES < out_features:
        raise ValueError(f"panels {tuple(panels.shape)} do not fit {out_features} outputs")
    if bias is not None and (bias.dtype != torch.float32 or bias.numel() != out_features):
        raise ValueError(f"bias must be float32 of {out_features}")
    kernel, k = _kernel(), panels.shape[1]
    panels_pointer, bias_pointer = panels.data_ptr(), None if bias is None else bias.data_ptr()

    def call(x: torch.Tensor) -> torch.Tensor:
        """x [..., K] -> [..., out_features]; rows past MAX_ROWS in passes of MAX_ROWS (each pass reads the
        weights again: meant for a few rows)."""
        # the C reads raw float32 memory: anything else would be read past its end
        if x.dtype != torch.float32 or x.device.type != "cpu":
            raise ValueError("small_linear takes float32 CPU tensors")
        if x.shape[-1] != k:
            raise ValueError(f"panels {tuple(panels.shape)} do not fit {x.shape[-1]} inputs")
        flat = x.reshape(-1, k).contiguous()
        rows = flat.shape[0]
        y = flat.new_empty(rows, out_features)
        threads = torch.get_num_threads()
        for first in range(0, rows, MAX_ROWS):
            count = min(MAX_ROWS, rows - first)
            x_pointer = flat.data_ptr() + first * k * 4
            y_pointer = y.data_ptr() + first * out_features * 4
            kernel(x_pointer, count, k, panels_pointer, out_features, bias_pointer, y_pointer, threads)
        return y.view(*x.shape[:-1], out_features)

    # the closure holds the pointers: keep their tensors alive with it
    call.panels, call.bias = panels, bias
    return call


def small_linear(x: torch.Tensor, panels: torch.Tensor, out_features: int, bias: torch.Tensor | None):
    """x [..., K] -> [..., out_features] = x W^T + bias (one call: `product` checks the weights once)."""
    return product(panels, out_features, bias)(x)
