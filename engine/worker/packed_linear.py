"""Faster products for a CPU model's float32 linears inside the engine's forwards: repacked copies of the weights.

A decode step of N sequences multiplies N rows by every weight: it reads the weights once whatever N, so its
product should cost what reading them costs; a prefill multiplies hundreds of rows and should run at the
multiply-adds' peak. Torch's stock linear (MKL) is far from the first (on an Intel CPU 8 rows cost about 3.5x
one row) and, on an AMD CPU, 10-20% from the second. So every linear is repacked into panels of 16 outputs for
a C kernel (engine/worker/kernels/panel_linear.c) that sums each output in MKL's own order (fused
multiply-adds one product at a time in blocks of 192, the blocks added to the bias in turn):
- forwards of 1-16 rows (decodes) always go through the kernel: it streams each weight once and does every
  row's work on it while it is in a register. Since it sums as MKL does for many rows, a decode row's linears
  equal, bit for bit, what transformers' own forward of the whole sequence computes for that position where
  the probe passes (MKL's own path for a thread's share of 1-3 rows sums otherwise). On an Intel CPU one row
  stays stock (MKL's matrix-vector product is faster than oneDNN's there; the kernel is not tuned for it);
- prefill-sized forwards go through the kernel only for a linear where `panel_linear.matches_stock` found it
  equal to the stock linear bit for bit on this machine (on an AMD EPYC: all of them; where MKL sums in
  another order, as it may on an Intel CPU, or with another BLAS, prefill stays stock).
  Elsewhere `EngineConfig(fast_prefill=True)` takes oneDNN-packed weights for them where MKL is slow, at the
  cost of its rounding (it moves Gemma 3 270M's logits up to 1.4e-4 from transformers', over the 1e-4 the
  exactness tests hold);
- where the C kernel cannot be built, 2-16 rows take oneDNN's packed weights.

Each copy costs the weights' bytes once more, so copies are made only for float32 weights on the CPU within a
budget, and swapped in only inside `small(rows)`: between the engine's forwards the model's linears are the
stock ones.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch

from engine.worker.kernels import panel_linear


def _vendor() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            return next((line.split(":")[1].strip() for line in info if line.startswith("vendor_id")), "")
    except OSError:
        return ""


# MKL's own kernels: Intel CPUs (where a torch without MKL has some other BLAS, measured nowhere: as Intel)
MKL_FAST = _vendor() == "GenuineIntel" or not torch.backends.mkl.is_available()
# rows (tokens in one forward) taken off the stock path: one row stays stock where MKL's own kernels run
MIN_ROWS = 2 if MKL_FAST else 1
MAX_ROWS = 16
# decode-sized forwards through the C kernel where it can be built (False: oneDNN's packed weights)
PANELS = True
# the row count oneDNN picks its weight layout for
PACKED_FOR_ROWS = 8
# weights packed at most (bytes): the copy doubles their memory
BUDGET_BYTES = 2 * 2**30


def _packable(model) -> list[torch.nn.Linear]:
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    if not linears or not torch.backends.mkldnn.is_available():
        return []
    # accelerate's offload hooks move weights around: leave such models alone
    if any(hasattr(m, "_hf_hook") for m in linears):
        return []
    weights = [m.weight for m in linears]
    if any(w.device.type != "cpu" or w.dtype != torch.float32 for w in weights):
        return []
    if sum(w.numel() * w.element_size() for w in weights) > BUDGET_BYTES:
        return []
    return linears


def _version(tensor: torch.Tensor | None) -> int:
    # an inference tensor (made under torch.inference_mode) keeps no version counter
    return -1 if tensor is None or tensor.is_inference() else tensor._version


class PackedLinears:
    def __init__(self, model, fast_prefill: bool = False):
        self.entries = []
        # prefill-sized forwards through oneDNN, where MKL is slow (EngineConfig.fast_prefill; fixed here: the
        # copies made depend on it)
        self.fast_prefill = fast_prefill and not MKL_FAST
        self.panels = PANELS and panel_linear.available()
        # False: every forward takes the stock path (a benchmark's baseline)
        self.enabled = True
        # (weight version, weight and bias data pointers, bias version) each copy was packed from
        self.packed_from: list[tuple[int, int, int, int]] = []
        for module in _packable(model):
            self.entries.append((module, self._pack(module)))
            self.packed_from.append(self._source(module))

    @staticmethod
    def _source(module) -> tuple[int, int, int, int]:
        # _parameters, not module.weight: nn.Module.__getattr__ costs a microsecond, and this runs every step
        weight, bias = module._parameters["weight"], module._parameters.get("bias")
        return _version(weight), weight.data_ptr(), bias.data_ptr() if bias is not None else 0, _version(bias)

    def _pack(self, module):
        kernel = packed = None
        exact = False
        with torch.inference_mode():
            weight = module.weight.detach()
            bias = None if module.bias is None else module.bias.detach()
            if self.panels:
                kernel = panel_linear.product(panel_linear.pack(weight), module.out_features, bias)
                exact = panel_linear.matches_stock(weight, bias, kernel)
            if not self.panels or (self.fast_prefill and not exact):
                packed = torch.ops.mkldnn._reorder_linear_weight(weight, PACKED_FOR_ROWS)
        return self._forward(module, packed, kernel, exact)

    def _refresh(self) -> None:
        """Pack again any weight the caller changed since (load_state_dict, an optimizer step, a new Parameter):
        a stale copy would answer with the old model."""
        sources = [self._source(module) for module, _ in self.entries]
        if sources == self.packed_from:
            return
        for i, (module, _) in enumerate(self.entries):
            if module.weight.device.type != "cpu" or module.weight.dtype != torch.float32:
                # the model moved or was cast: its stock linears from now on
                self.entries, self.packed_from = [], []
                return
            if sources[i] != self.packed_from[i]:
                self.entries[i] = (module, self._pack(module))
                self.packed_from[i] = sources[i]

    @staticmethod
    def _forward(module, packed: torch.Tensor | None, kernel, exact: bool):
        """The forward that stands in for `module`'s: `kernel` (a panel_linear product) for few rows, and for
        many where it is `exact` (MKL's bits); else oneDNN's packed weights where there are some; else the
        stock linear."""
        bias = module.bias

        def forward(x: torch.Tensor) -> torch.Tensor:
            if kernel is not None and (exact or x.numel() <= MAX_ROWS * x.shape[-1]):
                return kernel(x)
            if packed is not None:
                return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
            return torch.nn.functional.linear(x, module.weight, bias)

        forward.copies = [c for c in (packed, None if kernel is None else kernel.panels) if c is not None]
        forward.exact = exact
        return forward

    @property
    def exact_prefill(self) -> bool:
        """Prefill-sized forwards of every linear through the kernel, with MKL's bits."""
        return bool(self.entries) and all(f.exact for _, f in self.entries)

    @property
    def any_exact(self) -> bool:
        return any(f.exact for _, f in self.entries)

    @property
    def nbytes(self) -> int:
        """Bytes of the copies: the C kernel's panels and / or oneDNN's packed weights."""
        return sum(m.weight.numel() * m.weight.element_size() * len(f.copies) for m, f in self.entries)

    def small(self, rows: int):
        """The packed linears for one forward of `rows` tokens, where they gain (MIN_ROWS to MAX_ROWS; more
        where the kernel has MKL's bits or with fast_prefill)."""
        if (
            not self.entries
            or not self.enabled
            or rows < MIN_ROWS
            or (rows > MAX_ROWS and not (self.fast_prefill or self.any_exact))
        ):
            return nullcontext()
        self._refresh()
        return self._swapped()

    @contextmanager
    def _swapped(self):
        # an instance attribute shadows nn.Linear.forward; written to __dict__ (Module.__setattr__ is slow)
        for module, forward in self.entries:
            module.__dict__["forward"] = forward
        try:
            yield
        finally:
            for module, _ in self.entries:
                module.__dict__.pop("forward", None)
