"""Measure this machine's roofline for a loaded model, once, in the engine's process (needs torch).

Two numbers of the machine and two of the model, carried in the trace as one `roofline` event (see
kvtui/state/roofline.py, torch-free, for what the UI draws with them):
- memory bandwidth: best of a few copies of a 128 MiB tensor on the model's device (bytes read + written / s);
- peak FLOP/s: best of a few square matmuls in the model's dtype on its device (2 n^3 / s);
- weight bytes: the bytes of every weight a forward multiplies by (a tied embedding counted once, as the output
  projection; an untied input embedding only looks rows up, so it is left out);
- FLOPs per token: 2 x those weights' element count (one multiply-add per weight per token; attention over the
  context is left out, small next to the weights at these lengths).
"""

from __future__ import annotations

import time

COPY_BYTES = 128 * 2**20
REPEATS = 3


def _timed(fn, sync, repeats: int = REPEATS) -> float:
    # warm up
    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def model_weights(model) -> tuple[int, int]:
    """(bytes, elements) of the weights a forward multiplies by."""
    seen: set[int] = set()
    nbytes = elements = 0
    inp = model.get_input_embeddings()
    out = model.get_output_embeddings()
    tied = inp is not None and out is not None and inp.weight.data_ptr() == out.weight.data_ptr()
    skip = inp.weight.data_ptr() if inp is not None and not tied else None
    for param in model.parameters():
        ptr = param.data_ptr()
        if ptr in seen or ptr == skip:
            continue
        seen.add(ptr)
        nbytes += param.numel() * param.element_size()
        elements += param.numel()
    return nbytes, elements


def _sync(device):
    import torch

    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def copy_bandwidth(device) -> float:
    """Bytes/s of a copy of COPY_BYTES on `device` (read + written, best of REPEATS)."""
    import torch

    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    return 2 * COPY_BYTES / _timed(lambda: dst.copy_(src), _sync(device))


def measure_roofline(model) -> dict:
    """The `roofline` event's fields for `model` on this machine (about half a second on a CPU)."""
    import torch

    param = next(model.parameters())
    device, dtype = param.device, param.dtype
    sync = _sync(device)
    # its 2 x 128 MiB go back before the matmuls
    mem_bandwidth = copy_bandwidth(device)
    n = 4096 if device.type == "cuda" else 1024
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    with torch.inference_mode():
        mm_s = _timed(lambda: a @ b, sync)
    weight_bytes, weight_elements = model_weights(model)
    return {
        "device": str(device),
        "dtype": str(dtype).removeprefix("torch."),
        "mem_bandwidth": mem_bandwidth,
        "peak_flops": 2 * n**3 / mm_s,
        "weight_bytes": weight_bytes,
        "flops_per_token": 2 * weight_elements,
        "threads": torch.get_num_threads(),
    }


def emit_roofline(engine) -> dict:
    """Measure and put one `roofline` event into the engine's trace (before its first step)."""
    return engine.trace.emit("roofline", **measure_roofline(engine.model))
