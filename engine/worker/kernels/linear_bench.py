"""panel_linear against torch's two CPU products, on the linear shapes of SmolLM2: GFLOP/s of each, whether the
kernel gave MKL's bits, and the path the run plan's rule (engine/worker/path_probe.py) takes on these timings:
the kernel only where it has the bits a forward of those rows needs and beats MKL by the margin.
`python -m engine.worker.kernels --bench` prints it (run it with nothing else running; a VM's speed drifts, so
compare only figures of one run)."""

from __future__ import annotations

import functools
import time

import torch

from engine.worker import path_probe
from engine.worker.kernels import build, panel_linear
from engine.worker.packed_linear import MAX_ROWS

# (rows, outputs, inputs): SmolLM2's MLP up and down projections and its K/V projection, as a prefill of 512
# tokens, a chunk of 64, and decode steps of 8 and 1 rows
SHAPES = [
    (512, 1536, 576),
    (512, 576, 1536),
    (512, 192, 576),
    (64, 1536, 576),
    (8, 1536, 576),
    (1, 1536, 576),
]


def _seconds(call, x: torch.Tensor, repeats: int) -> float:
    for _ in range(2):
        call(x)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call(x)
        best = min(best, time.perf_counter() - start)
    return best


def _onednn(packed: torch.Tensor):
    return lambda x: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


@torch.inference_mode()
def compare(shapes=SHAPES, repeats: int = 10) -> list[dict]:
    """One row per shape: GFLOP/s of MKL (torch's stock linear), oneDNN (packed weights) and the kernel, and
    whether the kernel's output equals MKL's bit for bit."""
    rows = []
    for m, n, k in shapes:
        generator = torch.Generator().manual_seed(m * n + k)
        x, weight = torch.randn(m, k, generator=generator), torch.randn(n, k, generator=generator)
        onednn = torch.ops.mkldnn._reorder_linear_weight(weight, 8)
        kernel = panel_linear.product(panel_linear.pack(weight), n, None)
        flop = 2 * m * n * k
        mkl_s = _seconds(functools.partial(torch.nn.functional.linear, weight=weight), x, repeats)
        onednn_s = _seconds(_onednn(onednn), x, repeats)
        kernel_s = _seconds(kernel, x, repeats)
        mkl_bits = torch.equal(kernel(x), torch.nn.functional.linear(x, weight))
        # a decode's rows may take the kernel whatever its bits; a prefill's only with MKL's
        timings = (kernel_s, mkl_s)
        chosen = path_probe.decide(f"{m} rows", mkl_bits or m <= MAX_ROWS, functools.partial(tuple, timings))
        rows.append(
            {
                "shape": (m, n, k),
                "mkl": flop / mkl_s / 1e9,
                "onednn": flop / onednn_s / 1e9,
                "kernel": flop / kernel_s / 1e9,
                "mkl_bits": mkl_bits,
                "chosen": "kernel" if chosen.kernel else "MKL",
            }
        )
    return rows


def format_rows(rows: list[dict]) -> str:
    lines = [
        f"{path_probe.machine()}; kernels built for {build.target()} ({panel_linear.lanes()} lanes)",
        f"{'rows x out x in':>18} {'MKL':>7} {'oneDNN':>7} {'kernel':>7} {'chosen':>7}  GFLOP/s "
        f"({torch.get_num_threads()} threads)",
    ]
    for r in rows:
        shape = " x ".join(str(v) for v in r["shape"])
        bits = "MKL's bits" if r["mkl_bits"] else "other bits (MKL's 1-3 row path sums otherwise)"
        chosen = r[r["chosen"].lower()]
        lines.append(
            f"{shape:>18} {r['mkl']:>7.0f} {r['onednn']:>7.0f} {r['kernel']:>7.0f} {chosen:>7.0f}  "
            f"{r['chosen']}; {bits}"
        )
    return "\n".join(lines)
