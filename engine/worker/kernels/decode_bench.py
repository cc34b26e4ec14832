"""`python -m engine.worker.kernels --bench-decode`: the C decode attention alone, K/V stored as float32, int8
and fp8 e4m3, over a model's worth of layers (SmolLM2's shape by default: 30 layers, 3 KV heads of 3 query heads,
64 wide), one sequence at each context. Every layer has its own K/V, as in a decode step, so the reads come from
memory, not from a cache a single layer's would fit in. Rounds alternate the precisions, the order reversed
every other round; each figure is the median over rounds of one step's 30 calls."""

from __future__ import annotations

import statistics
import time

import torch

from engine.worker.kernels import build
from engine.worker.kernels.paged_decode import paged_decode
from engine.worker.kv_quant import KVQuantizer
from engine.worker.path_probe import machine

PRECISIONS = ("float32", "int8", "fp8_e4m3")


def compare(
    contexts=(2048, 8192),
    layers: int = 30,
    kv_heads: int = 3,
    groups: int = 3,
    dim: int = 64,
    rounds: int = 7,
) -> list[tuple[int, dict[str, float]]]:
    """(context, {precision: seconds for `layers` calls}) per context."""
    block = 16
    out = []
    generator = torch.Generator().manual_seed(0)
    for context in contexts:
        blocks = -(-context // block)
        table = torch.randperm(blocks, generator=generator)[None]
        lengths = torch.tensor([context])
        q = torch.randn(1, kv_heads, groups, dim, generator=generator)
        stored: dict[str, list] = {name: [] for name in PRECISIONS}
        for _ in range(layers):
            keys = torch.randn(kv_heads, blocks * block, dim, generator=generator)
            values = torch.randn(kv_heads, blocks * block, dim, generator=generator)
            stored["float32"].append((keys, values))
            for name in PRECISIONS[1:]:
                quant = KVQuantizer(name)
                stored[name].append((quant.quantize(keys), quant.quantize(values)))
        times: dict[str, list[float]] = {name: [] for name in PRECISIONS}
        for r in range(rounds):
            for name in PRECISIONS if r % 2 == 0 else PRECISIONS[::-1]:
                kv_dtype = None if name == "float32" else name
                start = time.perf_counter()
                for keys, values in stored[name]:
                    paged_decode(q, keys, values, table, lengths, block, dim**-0.5, kv_dtype=kv_dtype)
                times[name].append(time.perf_counter() - start)
        out.append((context, {name: statistics.median(t) for name, t in times.items()}))
    return out


def format_rows(rows) -> str:
    lines = [
        f"{machine()}; kernels built for {build.target()}",
        f"{'context':>7} " + " ".join(f"{name:>12}" for name in PRECISIONS) + "   (ms for all layers)",
    ]
    for context, seconds in rows:
        base = seconds["float32"]
        cells = [f"{seconds[n] * 1e3:>6.2f} {base / seconds[n]:>4.2f}x" for n in PRECISIONS]
        lines.append(f"{context:>7} " + " ".join(cells))
    lines.append(f"threads {torch.get_num_threads()}; x: float32's time / this one's")
    return "\n".join(lines)
