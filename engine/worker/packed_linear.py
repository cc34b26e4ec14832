"""oneDNN-packed copies of a CPU model's float32 linear weights, for the forwards where MKL's sgemm is slow.

Torch's stock linear multiplies through MKL. On an Intel CPU MKL runs a handful of rows far below the machine's
peak: 8 rows cost about 3.5x one row for the same weight bytes (2-core Sapphire Rapids), where oneDNN's blocked
weight layout keeps 8 rows near 2x one row; one row and prefill-sized forwards are faster stock there. On other
CPUs MKL takes a generic code path, and oneDNN is 2-2.5x faster at every row count (a 2-core AMD EPYC, one
thread: 8 rows 55 against 91-149 GFLOP/s, 512 rows 95 against 214-220; SmolLM2's 64-token prefill 210-249
against 99-115 ms, a batch-1 decode step 60-70 against 32-45 ms). Results agree with the stock path to float32
rounding (relative 1e-6; the exactness tests hold the engine's logits against transformers' forward with these
in place).

Where MKL is slow, forwards of up to 8 rows (decode) go to a C kernel instead, faster than oneDNN there
(engine/worker/kernels/small_linear.c; its own panels of the weights). Prefill-sized forwards stay stock by default, even where oneDNN is faster: their logits then match
transformers' own forward within the 1e-4 the exactness tests hold, and oneDNN's rounding does not (Gemma 3
270M: transformers' own forward, MKL against oneDNN, differs by 7e-5; through the engine up to 1.4e-4).
`EngineConfig(fast_prefill=True)` takes oneDNN for those too where MKL is slow.

The packed copy costs the weights' bytes once more, so it is made only for float32 weights on the CPU within
a budget. Only forwards of MIN_ROWS to MAX_ROWS rows use it (on an Intel CPU 2-16, elsewhere 1-16, and any
number with fast_prefill), and only inside `small(rows)`: between the engine's forwards the model's linears
are the stock ones.
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
# rows (tokens in one forward) for which the packed weights are used. With MKL's own kernels one row (a
# matrix-vector product) and prefill are faster stock: SmolLM2's batch-1 decode step 35 ms stock, 44 ms packed
MIN_ROWS = 2 if MKL_FAST else 1
MAX_ROWS = 16
# where MKL is slow, forwards of up to small_linear.MAX_ROWS rows go to the C kernel (faster than oneDNN there:
# engine/worker/kernels/small_linear.py), whose panels cost the weights' bytes once more; not measured on Intel
PANELS = not MKL_FAST
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
        # prefill-sized forwards through oneDNN too, where MKL is slow (EngineConfig.fast_prefill)
        self.fast_prefill = fast_prefill and not MKL_FAST
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
        panels = None
        with torch.inference_mode():
            weight = module.weight.detach()
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, PACKED_FOR_ROWS)
            if PANELS and small_linear.available():
                panels = small_linear.pack(weight)
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
        packed: torch.Tensor, panels: torch.Tensor | None, out_features: int, bias: torch.Tensor | None
    ):
        most = small_linear.MAX_ROWS

        def forward(x: torch.Tensor) -> torch.Tensor:
            if panels is not None and x.numel() <= most * x.shape[-1]:
                return small_linear.small_linear(x, panels, out_features, bias)
            return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

        forward.panels = panels
        return forward

    @property
    def nbytes(self) -> int:
        """Bytes of the packed copies (oneDNN's, and the C kernel's panels where they are made)."""
        return sum(
            m.weight.numel() * m.weight.element_size() * (1 if f.panels is None else 2)
            for m, f in self.entries
        )

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
