"""Faster products for a CPU model's float32 linears inside the engine's forwards: repacked copies of the weights.

A decode step of N sequences multiplies N rows by every weight: it reads the weights once whatever N, so its
product should cost what reading them costs. Torch's stock linear (MKL) is far from that at a few rows: on an
Intel CPU 8 rows cost about 3.5x one row (2-core Sapphire Rapids), and on other CPUs MKL takes a generic code
path, 2-2.5x slower than oneDNN at every row count (a 2-core AMD EPYC, one thread: 8 rows 55 against 91-149
GFLOP/s, 512 rows 95 against 214-220). So:
- forwards of 1-16 rows (decodes) go to a C kernel (engine/worker/kernels/small_linear.c) that streams each
  weight once from panels of 16 outputs and sums in blocks of 32 products: faster than oneDNN's packed product
  (AMD: one row 20% faster, 8 rows 0-10%), and closer to MKL's rounding: SmolLM2 decoding 8 prompts at once
  moved its logits 6.7e-5 from transformers' forward, as the stock path does (6.1e-5), where oneDNN's moved
  them 1.0e-4. On an Intel CPU one row stays stock (MKL's matrix-vector product was faster than oneDNN there:
  35 against 44 ms a SmolLM2 step; the kernel was not measured there);
- prefill-sized forwards stay stock: oneDNN's rounding moves Gemma 3 270M's logits up to 1.4e-4 from
  transformers' (its own forward moves 7e-5 between the two libraries), over the 1e-4 the exactness tests
  hold. `EngineConfig(fast_prefill=True)` takes oneDNN-packed weights for them where MKL is slow (2x faster);
- where the C kernel cannot be built, 2-16 rows take oneDNN's packed weights, as before the kernel.

Each copy costs the weights' bytes once more, so copies are made only for float32 weights on the CPU within a
budget, and swapped in only inside `small(rows)`: between the engine's forwards the model's linears are the
stock ones.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch

from engine.worker.kernels import small_linear


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


class PackedLinears:
    def __init__(self, model, fast_prefill: bool = False):
        self.entries = []
        # prefill-sized forwards through oneDNN, where MKL is slow (EngineConfig.fast_prefill; fixed here: the
        # copies made depend on it)
        self.fast_prefill = fast_prefill and not MKL_FAST
        self.panels = PANELS and small_linear.available()
        # False: every forward takes the stock path (a benchmark's baseline)
        self.enabled = True
        # (weight version, weight and bias data pointers) each copy was packed from
        self.packed_from: list[tuple[int, int, int]] = []
        for module in _packable(model):
            self.entries.append((module, self._pack(module)))
            self.packed_from.append(self._source(module))

    @staticmethod
    def _source(module) -> tuple[int, int, int]:
        # _parameters, not module.weight: nn.Module.__getattr__ costs a microsecond, and this runs every step
        weight, bias = module._parameters["weight"], module._parameters.get("bias")
        # an inference tensor (made under torch.inference_mode) keeps no version counter
        version = -1 if weight.is_inference() else weight._version
        return version, weight.data_ptr(), bias.data_ptr() if bias is not None else 0

    def _pack(self, module):
        panels = packed = None
        with torch.inference_mode():
            weight = module.weight.detach()
            if self.panels:
                panels = small_linear.pack(weight)
            if not self.panels or self.fast_prefill:
                packed = torch.ops.mkldnn._reorder_linear_weight(weight, PACKED_FOR_ROWS)
        return self._forward(packed, panels, module.out_features, module.bias)

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
    def _forward(
        packed: torch.Tensor | None, panels: torch.Tensor | None, out_features: int, bias: torch.Tensor | None
    ):
        few_rows = None if panels is None else small_linear.product(panels, out_features, bias)

        def forward(x: torch.Tensor) -> torch.Tensor:
            if few_rows is not None and x.numel() <= MAX_ROWS * x.shape[-1]:
                return few_rows(x)
            return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

        forward.copies = [c for c in (packed, panels) if c is not None]
        return forward

    @property
    def nbytes(self) -> int:
        """Bytes of the copies: the C kernel's panels and / or oneDNN's packed weights."""
        return sum(m.weight.numel() * m.weight.element_size() * len(f.copies) for m, f in self.entries)

    def small(self, rows: int):
        """The packed linears for one forward of `rows` tokens, where they gain (MIN_ROWS to MAX_ROWS, or more
        with fast_prefill)."""
        if (
            not self.entries
            or not self.enabled
            or rows < MIN_ROWS
            or (rows > MAX_ROWS and not self.fast_prefill)
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
