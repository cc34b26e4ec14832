"""Which implementation runs each operation of the engine's forwards: chosen once, when the runner is built, from
the device, the dtype and the model, and printable (`RunPlan.describe`).

Two plans, one per kind of machine:
    CPU float32     decode attention by the C kernel over the pool in place (kernels/paged_decode.c), linears by
                    the C panel kernel (packed_linear.py), every step of a Llama-family model fused (fused_forward.py)
    anything else   torch's SDPA over whole blocks gathered, transformers' own linears and modules (the reference)
On the CPU a kernel runs only where it is faster than torch's op on this machine, by a probe on the model's own
shapes (path_probe.py; KVTUI_PATHS forces either): the decode attention as one choice, the linears per shape
and row count. An operation the machine or the model cannot take as planned (no C compiler,
KVTUI_NO_KERNELS=1, a model the fused step does not fit, a kernel that loses its race) takes the reference path
instead, and the plan says why. Prefill attention is SDPA on
every plan (sdpa.py). Tests build a runner with a plan of their own to compare two paths.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.models.shape import ModelShape
from engine.worker import decode_probe, packed_linear
from engine.worker.fused_fit import why_not as fused_why_not
from engine.worker.fused_forward import FusedForward
from engine.worker.kernels import build as kernels_build
from engine.worker.kernels import paged_decode
from engine.worker.packed_linear import PackedLinears
from engine.worker.path_probe import machine

# decode attention: the C kernel reading each sequence's blocks in place, or SDPA over gathered blocks
PAGED_DECODE = "paged_decode"
SDPA = "sdpa"
# linears: the C panel kernel, or torch.nn.Linear's own
PANEL = "panel_linear"
STOCK = "stock"
# a step: the fused C layers, or the model's modules through transformers' forward
FUSED = "fused"
MODULES = "modules"

_WORDS = {
    PAGED_DECODE: "C kernel, every decode's K/V read in place through its block table",
    SDPA: "SDPA over whole blocks gathered, one call per group of like context lengths",
    STOCK: "torch.nn.Linear",
    FUSED: "norms, rotary and K/V writes in C, no module calls (the modules under through_modules or a global hook)",
    MODULES: "transformers' forward through the model's modules",
}
_PREFILL_WORDS = {
    "cpu": "SDPA is_causal over the chunk; a cached prefix gathered, merged by log-sum-exp",
    "cuda": "SDPA is_causal over the chunk; a cached prefix gathered, one call with a lower-right bias",
}


@dataclass(frozen=True)
class RunPlan:
    """What runs decode attention, the linears and a step (the defaults: the reference plan)."""

    attention: str = SDPA
    linears: str = STOCK
    step: str = MODULES
    # what the plan runs on ("cpu", "torch.float32"); filled in by `build`
    device: str = ""
    dtype: str = ""
    # (operation, why it takes the reference path here)
    why: tuple[tuple[str, str], ...] = ()
    # linears that take the panel kernel at some row count, of all the model's linears
    packed_linears: int = 0
    all_linears: int = 0
    # each probed choice, a line each (path_probe.Decision.describe): the decode attention's, the linears'
    choices: tuple[str, ...] = ()
    # window layers keep their K/V in rings (engine/worker/attention.py ring_attention: SDPA, a mask)
    rings: bool = False
    # K/V stored quantized (int8 | fp8_e4m3, engine/worker/kv_quant.py); "" the model's dtype
    kv_dtype: str = ""

    @classmethod
    def reference(cls) -> RunPlan:
        """torch's SDPA, stock linears, the modules: what every device but a float32 CPU runs."""
        return cls()

    @classmethod
    def for_device(cls, device: torch.device, dtype: torch.dtype) -> RunPlan:
        if device.type == "cpu" and dtype == torch.float32:
            return cls(PAGED_DECODE, PANEL, FUSED)
        return cls.reference()

    def describe(self) -> str:
        if self.linears == PANEL:
            linears = (
                f"C kernel in {self.packed_linears} of {self.all_linears} linears, at the row counts the probe "
                "chose it for (below)"
            )
        else:
            linears = _WORDS[STOCK]
        prefill = _PREFILL_WORDS.get(self.device, "SDPA with an explicit causal mask")
        lines = [
            f"run plan ({self.device} {self.dtype}):",
            f"  decode attention   {self.attention}: {_WORDS[self.attention]}",
            f"  prefill attention  {prefill}",
            f"  linears            {self.linears}: {linears}",
            f"  step               {self.step}: {_WORDS[self.step]}",
        ]
        if self.rings:
            lines.append("  window layers      rings: SDPA over each request's ring row, masked")
        if self.kv_dtype:
            reads = (
                "the C kernel reads the 8-bit rows" if self.attention == PAGED_DECODE else "SDPA dequantized"
            )
            lines.append(
                f"  K/V storage        {self.kv_dtype}, a float32 scale per token and KV head: quantized on write, "
                f"dequantized on read (prefill: the gathered prefix; decode: {reads})"
            )
        lines += [f"  ({operation}: {reason})" for operation, reason in self.why]
        if self.choices:
            lines.append(f"  probed on {machine()}, kernels built for {kernels_build.target()}:")
            lines += [f"    {choice}" for choice in self.choices]
        return "\n".join(lines)


def build(
    wanted: RunPlan,
    model,
    device: torch.device,
    dtype: torch.dtype,
    windows: tuple[int | None, ...],
    paged_layers: int,
    separate: bool = False,
    rings: bool = False,
    kv_dtype: str | None = None,
    shape: ModelShape | None = None,
    block_size: int = 16,
) -> tuple[RunPlan, PackedLinears | None, FusedForward | None]:
    """`wanted` as it runs here, with its linears and fused step built: each operation this machine or model
    cannot take as wanted, or that loses its probe here, takes the reference path instead, and the plan says
    why. `separate`: each request runs a forward of its own (longrope); `rings`: window layers keep their K/V in
    rings; `shape` and `block_size`: the model's and the pool's, which the decode attention's probe races on."""
    why, choices = [], []
    attention = wanted.attention
    if attention == PAGED_DECODE and not paged_decode.usable(device, dtype):
        attention = SDPA
        on_target = device.type == "cpu" and dtype == torch.float32
        reason = paged_decode.why_not() if on_target else "the kernel takes float32 on the CPU"
        why.append(("decode attention", reason))
    elif attention == PAGED_DECODE and shape is not None:
        decision = decode_probe.decide(
            shape.kv_heads, shape.q_heads // shape.kv_heads, shape.head_dim, block_size
        )
        choices.append(decision.describe())
        if not decision.kernel:
            attention = SDPA
            why.append(("decode attention", "SDPA over gathered blocks is faster here (probe below)"))
    linears = None
    if wanted.linears == PANEL:
        reason = packed_linear.why_not(model)
        if not reason:
            linears = PackedLinears(model)
            choices += linears.describe()
            if not linears.entries:
                linears, reason = (
                    None,
                    "torch.nn.Linear is faster here at every shape and row count (probe below)",
                )
        if reason:
            why.append(("linears", reason))
    fused = None
    if wanted.step == FUSED:
        reason = "each request runs a forward of its own" if separate else ""
        reason = reason or ("window layers keep rings" if rings else "")
        reason = reason or fused_why_not(model, windows, paged_layers)
        if not reason:
            fused = FusedForward.build(model)
            reason = "" if fused is not None else "the C norm does not give the model's norms' bits here"
        if reason:
            why.append(("step", reason))
    plan = RunPlan(
        attention,
        STOCK if linears is None else PANEL,
        MODULES if fused is None else FUSED,
        device.type,
        str(dtype),
        tuple(why),
        0 if linears is None else len(linears.entries),
        0 if linears is None else sum(linears.shape_counts.values()),
        tuple(choices),
        rings,
        kv_dtype or "",
    )
    return plan, linears, fused
