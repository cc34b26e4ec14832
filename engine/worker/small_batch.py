"""Decode steps of a few sequences on the CPU: every linear layer as one matrix-vector product per row, over
slices of the weight small enough to stay in the cache, instead of one small matrix product.

Why (issue 20, SmolLM2 fp32, 512 tokens of context): a decode step reads all the weights once whatever the
batch, so a batch of 8 should cost little more than a batch of 1. It cost 3x: MKL's sgemm for 2-16 rows (as
F.linear calls it) runs far below the memory floor on this CPU (the profile of one step: aten::mm 76-86% of
it), while its matrix-vector product for one row sits on the floor. So a row at a time: the first row streams
a slice of the weight from memory, the other rows find it in the cache (a slice is SLICE_BYTES; the output
head, 113 MB in SmolLM2, goes in slices, the other layers' weights are smaller than one). Each row is also
computed exactly as a batch of one computes it, so a decode's answer does not depend on its batch.

Only where it was measured to help: float32 on the CPU, 2 to MAX_ROWS rows. The runner turns it on for
decode-only forwards (`RowwiseLinear.active`); otherwise every layer runs its own F.linear.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F

MAX_ROWS = 16
SLICE_BYTES = 4 << 20


def rowwise_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear(x, weight, bias) for x [..., rows, in] with few rows: one GEMV per row and weight slice."""
    rows = x.reshape(-1, x.shape[-1])
    out = torch.empty(rows.shape[0], weight.shape[0], dtype=x.dtype, device=x.device)
    step = max(1, SLICE_BYTES // (weight.shape[1] * weight.element_size()))
    for start in range(0, weight.shape[0], step):
        part = weight[start : start + step]
        for j in range(rows.shape[0]):
            torch.mv(part, rows[j], out=out[j, start : start + step])
    if bias is not None:
        out += bias
    return out.view(*x.shape[:-1], weight.shape[0])


class RowwiseLinear:
    """Gives the model's nn.Linear layers a forward that computes row by row while `active` (a per-instance
    forward: the class and other models are untouched; outside `active` it is the layer's own F.linear). Every
    engine on one model shares the layers' switch (a list kept on the model)."""

    def __init__(self, model):
        self.enabled = next(model.parameters()).device.type == "cpu"
        self.switch = model.__dict__.setdefault("_kvtui_rowwise", [False])
        if not self.enabled:
            return
        for module in model.modules():
            if type(module) is torch.nn.Linear and "forward" not in module.__dict__:
                module.forward = _forward_of(module, self.switch)

    @contextmanager
    def active(self, rows: int):
        """Row by row for this forward when it has 2..MAX_ROWS rows (a decode step of a small batch)."""
        previous = self.switch[0]
        self.switch[0] = self.enabled and 2 <= rows <= MAX_ROWS
        try:
            yield
        finally:
            self.switch[0] = previous


def _forward_of(module: torch.nn.Linear, switch: list[bool]):
    def forward(x: torch.Tensor) -> torch.Tensor:
        if switch[0] and x.dtype == torch.float32 and 2 <= x.numel() // x.shape[-1] <= MAX_ROWS:
            return rowwise_linear(x, module.weight, module.bias)
        return F.linear(x, module.weight, module.bias)

    return forward
