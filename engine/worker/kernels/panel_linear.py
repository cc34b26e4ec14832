"""The C product of rows by a weight matrix (panel_linear.c) as a torch call: CPU, float32, MKL's sum order.

panel_linear.c multiplies from the weights repacked here into panels of one vector's outputs (`pack`: 16 for an
AVX-512 build, 8 for AVX2, 4 for NEON) and sums every
output in the order it is given: fused multiply-adds one product at a time within blocks of k, the blocks'
sums added to the bias in turn. `mkl_blocks` is the order MKL's sgemm uses on an AMD EPYC (float64
emulations of candidate orders, bit for bit on every shape tried): blocks of 192, except that a K between 192
and 384 is split into two halves. With that order the kernel's products equal torch's stock linear bit for bit,
which `matches_stock` checks on the machine it runs on before the engine lets the kernel stand in for MKL.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from engine.worker.kernels import build
from engine.worker.kernels.build import bind

# rows of one few-row pass (panel_linear.c FEW_ROWS): one pass reads the weights once
FEW_ROWS = 8
# MKL sgemm's block of k (see mkl_blocks)
MKL_BLOCK = 192
# rows of matches_stock's probe per torch thread (32 at least): MKL splits rows among its threads, and a
# thread's share of 1-3 rows takes another path that sums otherwise; 8 per thread keep every share at 4 or more
PROBE_ROWS_PER_THREAD = 8


@functools.cache
def _kernel():
    # x, M, K, packed, N, bias, ends, blocks, y, threads
    pointer, long = ctypes.c_void_p, ctypes.c_int64
    return bind(
        "panel_linear",
        [pointer, long, long, pointer, long, pointer, pointer, ctypes.c_int, pointer, ctypes.c_int],
    )


def available() -> bool:
    return _kernel() is not None


@functools.cache
def lanes() -> int:
    """The outputs of one panel in the kernel as built here (its vector's floats)."""
    library = build.load("panel_linear")
    if library is None:
        raise RuntimeError(f"no panel_linear kernel: {why_not()}")
    library.panel_lanes.restype = ctypes.c_int
    return library.panel_lanes()


def why_not() -> str:
    """Why the kernel is not available here ('' when it is)."""
    return "" if available() else build.why_not.get("panel_linear", "")


def mkl_blocks(k: int) -> list[int]:
    """The ends of the blocks of k in which MKL's sgemm sums (measured: one block up to 192; two halves up to
    384, for an even K; then blocks of 192, the remainder last). An odd K between 192 and 384 sums otherwise
    (no split into two blocks matched 193 or 383): the probe then keeps that linear's prefill stock."""
    if k <= MKL_BLOCK:
        return [k]
    if k < 2 * MKL_BLOCK:
        return [k // 2, k]
    return [min(end, k) for end in range(MKL_BLOCK, k + MKL_BLOCK, MKL_BLOCK) if end - MKL_BLOCK < k]


def pack(weight: torch.Tensor) -> torch.Tensor:
    """[N, K] -> [ceil(N / L), K, L] panels of L = `lanes()` outputs (the last padded with zeros)."""
    n, k = weight.shape
    width = lanes()
    padded = -(-n // width) * width
    full = weight.new_zeros(padded, k)
    full[:n] = weight
    return full.view(padded // width, width, k).transpose(1, 2).contiguous()


def product(
    panels: torch.Tensor, out_features: int, bias: torch.Tensor | None, blocks: list[int] | None = None
):
    """x -> x W^T + bias for the weights packed in `panels`, summed in `blocks` (default: mkl_blocks). The
    weights and bias are checked once here; each call checks only x (a decode step makes one per linear)."""
    if panels.dtype != torch.float32 or panels.device.type != "cpu":
        raise ValueError("panel_linear takes float32 CPU tensors")
    width = lanes()
    if panels.dim() != 3 or panels.shape[2] != width or panels.shape[0] * width < out_features:
        raise ValueError(f"panels {tuple(panels.shape)} do not fit {out_features} outputs")
    if not panels.is_contiguous():
        raise ValueError("panels must be contiguous (as pack makes them)")
    if bias is not None and (
        bias.dtype != torch.float32 or bias.device.type != "cpu" or bias.numel() != out_features
    ):
        raise ValueError(f"bias must be float32 on the CPU, of {out_features}")
    if bias is not None:
        bias = bias.detach().contiguous()
    kernel, k = _kernel(), panels.shape[1]
    blocks = mkl_blocks(k) if blocks is None else blocks
    if not blocks or blocks[-1] != k or any(b <= a for a, b in zip([0, *blocks], blocks)):
        raise ValueError(f"blocks {blocks} do not split {k} inputs")
    ends = (ctypes.c_int64 * len(blocks))(*blocks)
    panels_pointer, bias_pointer = panels.data_ptr(), None if bias is None else bias.data_ptr()

    def call(x: torch.Tensor) -> torch.Tensor:
        """x [..., K] -> [..., out_features]."""
        # the C reads raw float32 memory: anything else would be read past its end
        if x.dtype != torch.float32 or x.device.type != "cpu":
            raise ValueError("panel_linear takes float32 CPU tensors")
        if x.shape[-1] != k:
            raise ValueError(f"panels {tuple(panels.shape)} do not fit {x.shape[-1]} inputs")
        flat = x.reshape(-1, k).contiguous()
        rows = flat.shape[0]
        y = flat.new_empty(rows, out_features)
        if rows:
            threads = torch.get_num_threads()
            refused = kernel(
                flat.data_ptr(),
                rows,
                k,
                panels_pointer,
                out_features,
                bias_pointer,
                ends,
                len(blocks),
                y.data_ptr(),
                threads,
            )
            if refused:
                raise ValueError(f"panel_linear refused {rows} rows x {k} inputs (blocks {blocks})")
        return y.view(*x.shape[:-1], out_features)

    # the closure holds the pointers: keep their tensors alive with it
    call.panels, call.bias, call.ends = panels, bias, ends
    return call


@torch.inference_mode()
def matches_stock(weight: torch.Tensor, bias: torch.Tensor | None, kernel, rows: int | None = None) -> bool:
    """Whether `kernel` (a `product` of these weights) gives torch's stock linear bit for bit on this machine
    for a prefill-sized forward of random rows (another BLAS, or MKL on another CPU, sums in another order:
    then about 90% of the outputs differ in their last bits). The order it checks is MKL's for a thread's
    share of 4 or more rows, whatever the thread count; a share of 1-3 rows MKL sums otherwise on any CPU."""
    rows = rows or max(32, PROBE_ROWS_PER_THREAD * torch.get_num_threads())
    generator = torch.Generator().manual_seed(weight.shape[0] * 7919 + weight.shape[1])
    x = torch.randn(rows, weight.shape[1], generator=generator)
    return torch.equal(kernel(x), torch.nn.functional.linear(x, weight, bias))


def panel_linear(x: torch.Tensor, panels: torch.Tensor, out_features: int, bias: torch.Tensor | None):
    """x [..., K] -> [..., out_features] = x W^T + bias (one call: `product` checks the weights once)."""
    return product(panels, out_features, bias)(x)
