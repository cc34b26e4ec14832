"""A CPU float32 model's linears through the C panel kernel inside the engine's forwards, from copies of their
weights repacked into panels of one vector's outputs (engine/worker/kernels/panel_linear.c).

A decode step of N sequences multiplies N rows by every weight: it reads the weights once whatever N, so its
product should cost what reading them costs; a prefill multiplies hundreds of rows and should run at the
multiply-adds' peak. Torch's stock linear (MKL) is far from the first (8 rows cost several times one row). The
kernel sums each output in MKL's own order (fused multiply-adds one product at a time in blocks of 192, the
blocks added to the bias in turn):
- forwards of 1-16 rows (decodes) always go through it: it streams each weight once and does every row's work
  on it while it is in a register. Where the probe below passes, a decode row's linears equal, bit for bit,
  what transformers' own forward of the whole sequence computes for that position (MKL's own path for a
  thread's share of 1-3 rows sums otherwise);
- prefill-sized forwards go through it only for a linear where `panel_linear.matches_stock` found it equal to
  the stock linear bit for bit on this machine (on the AMD EPYC measured here, all of them); elsewhere (MKL
  summing in another order, another BLAS) that linear's prefill stays stock.

Each copy costs the weights' bytes once more, so copies are made only for float32 weights on the CPU within a
budget, and swapped in only inside `swapped_in()`: between the engine's forwards the model's linears are the
stock ones.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from engine.worker.kernels import panel_linear

# rows up to which every linear takes the kernel (a decode step's)
MAX_ROWS = 16
# weights packed at most (bytes): the copy doubles their memory
BUDGET_BYTES = 2 * 2**30


def _linears(model) -> list[torch.nn.Linear]:
    return [m for m in model.modules() if type(m) is torch.nn.Linear]


def why_not(model) -> str:
    """Why the model's linears cannot take the kernel ('' when they can)."""
    if not panel_linear.available():
        return f"no panel_linear kernel: {panel_linear.why_not()}"
    linears = _linears(model)
    if not linears:
        return "no torch.nn.Linear in the model"
    # accelerate's offload hooks move weights around
    if any(hasattr(m, "_hf_hook") for m in linears):
        return "accelerate hooks move the weights"
    weights = [m.weight for m in linears]
    if any(w.device.type != "cpu" or w.dtype != torch.float32 for w in weights):
        return "the kernel takes float32 weights on the CPU"
    if sum(w.numel() * w.element_size() for w in weights) > BUDGET_BYTES:
        return f"over {BUDGET_BYTES // 2**30} GiB of weights to copy"
    return ""


def _version(tensor: torch.Tensor | None) -> int:
    # an inference tensor (made under torch.inference_mode) keeps no version counter
    return -1 if tensor is None or tensor.is_inference() else tensor._version


class PackedLinears:
    def __init__(self, model):
        # (module, the forward that stands in for its own)
        self.entries = []
        # (weight version, weight and bias data pointers, bias version) each copy was packed from
        self.packed_from: list[tuple[int, int, int, int]] = []
        for module in _linears(model):
            self.entries.append((module, self._pack(module)))
            self.packed_from.append(self._source(module))

    @staticmethod
    def _source(module) -> tuple[int, int, int, int]:
        # _parameters, not module.weight: nn.Module.__getattr__ costs a microsecond, and this runs every step
        weight, bias = module._parameters["weight"], module._parameters.get("bias")
        return _version(weight), weight.data_ptr(), bias.data_ptr() if bias is not None else 0, _version(bias)

    @staticmethod
    def _pack(module):
        """The forward that stands in for `module`'s: the kernel for few rows, and for many where it gives
        MKL's bits (`exact`); the stock linear for the others."""
        with torch.inference_mode():
            weight = module.weight.detach()
            bias = None if module.bias is None else module.bias.detach()
            kernel = panel_linear.product(panel_linear.pack(weight), module.out_features, bias)
            exact = panel_linear.matches_stock(weight, bias, kernel)

        def forward(x: torch.Tensor) -> torch.Tensor:
            if exact or x.numel() <= MAX_ROWS * x.shape[-1]:
                return kernel(x)
            return torch.nn.functional.linear(x, module.weight, module.bias)

        forward.panels = kernel.panels
        forward.exact = exact
        return forward

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

    @property
    def exact_count(self) -> int:
        """Linears whose prefill-sized forwards take the kernel (it gives MKL's bits for them here)."""
        return sum(f.exact for _, f in self.entries)

    @property
    def exact_prefill(self) -> bool:
        """Every linear's prefill-sized forwards through the kernel, with MKL's bits."""
        return bool(self.entries) and self.exact_count == len(self.entries)

    @property
    def nbytes(self) -> int:
        """Bytes of the kernel's panels."""
        return sum(f.panels.numel() * f.panels.element_size() for _, f in self.entries)

    @contextmanager
    def swapped_in(self):
        """The kernel's forwards in place of the linears' own for one forward of the engine."""
        self._refresh()
        # an instance attribute shadows nn.Linear.forward; written to __dict__ (Module.__setattr__ is slow)
        for module, forward in self.entries:
            module.__dict__["forward"] = forward
        try:
            yield
        finally:
            for module, _ in self.entries:
                module.__dict__.pop("forward", None)
