"""A CPU float32 model's linears through the C panel kernel inside the engine's forwards, from copies of their
weights repacked into panels of one vector's outputs (engine/worker/kernels/panel_linear.c).

A decode step of N sequences multiplies N rows by every weight: it reads the weights once whatever N, so its
product should cost what reading them costs; a prefill multiplies hundreds of rows and should run at the
multiply-adds' peak. The kernel sums each output in MKL's own order (fused multiply-adds one product at a time
in blocks of 192, the blocks added to the bias in turn), streaming each weight once for a decode's few rows.
Which forwards take it is measured, per linear shape and per row bucket (ROW_BUCKETS: one row, a decode
step's few, a prefill's many), by engine/worker/path_probe.py on this machine: the kernel where it is faster
than the stock linear by the probe's margin, the stock linear elsewhere (on an AVX-512 EPYC the kernel wins
at every bucket; a BLAS or CPU it was not tuned on may not). Exactness:
- a decode's rows: where the kernel runs and the probe below passes, a decode row's linears equal, bit for bit,
  what transformers' own forward of the whole sequence computes for that position (MKL's own path for a
  thread's share of 1-3 rows sums otherwise: within float32 rounding of it);
- a prefill's rows take the kernel only for a linear where `panel_linear.matches_stock` found it equal to the
  stock linear bit for bit on this machine.

Each copy costs the weights' bytes once more, so copies are made only for float32 weights on the CPU within a
budget, and swapped in only inside `swapped_in()`: between the engine's forwards the model's linears are the
stock ones.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager

import torch

from engine.worker import path_probe
from engine.worker.kernels import build as kernels_build
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


# the row counts a linear's path is chosen for, each by a probe at the rows given: a decode's one row, a decode
# step's few, a prefill's many (the kernel's path for those only where it gives MKL's bits)
ROW_BUCKETS = ((1, "one row"), (8, f"rows 2-{MAX_ROWS}"), (128, f"rows over {MAX_ROWS}"))


def stock_linear(module: torch.nn.Linear):
    """`module`'s own product, reading its weight and bias at each call (a caller may replace them)."""
    parameters = module._parameters

    def product(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, parameters["weight"], parameters.get("bias"))

    return product


def bucket(rows: int) -> int:
    """The ROW_BUCKETS index of a forward of `rows` rows."""
    return 0 if rows == 1 else (1 if rows <= MAX_ROWS else 2)


class PackedLinears:
    def __init__(self, model):
        # (module, the forward that stands in for its own), for the linears that take the kernel at some rows
        self.entries = []
        # (weight version, weight and bias data pointers, bias version) each copy was packed from
        self.packed_from: list[tuple[int, int, int, int]] = []
        # (outputs, inputs, bias, exact) -> one path_probe.Decision per ROW_BUCKETS entry
        self.decisions: dict[tuple[int, int, bool, bool], tuple[path_probe.Decision, ...]] = {}
        # linears of each shape, for the plan's lines
        self.shape_counts: dict[tuple[int, int], int] = {}
        # ROW_BUCKETS index -> for_rows' answer (emptied when a weight is packed again, which bumps version)
        self._for_rows: dict[int, dict] = {}
        self.version = 0
        for module in _linears(model):
            shape = (module.out_features, module.in_features)
            self.shape_counts[shape] = self.shape_counts.get(shape, 0) + 1
            forward = self._pack(module)
            if forward is not None:
                self.entries.append((module, forward))
                self.packed_from.append(self._source(module))

    @staticmethod
    def _source(module) -> tuple[int, int, int, int]:
        # _parameters, not module.weight: nn.Module.__getattr__ costs a microsecond, and this runs every step
        weight, bias = module._parameters["weight"], module._parameters.get("bias")
        return _version(weight), weight.data_ptr(), bias.data_ptr() if bias is not None else 0, _version(bias)

    def _decide(self, weight, bias, kernel, exact: bool) -> tuple[path_probe.Decision, ...]:
        """The path of each row bucket for a linear of this shape, probed once per shape (and per machine)."""
        n, k = weight.shape
        key = (n, k, bias is not None, exact)
        if key not in self.decisions:
            build_id, threads = kernels_build.build_id("panel_linear"), torch.get_num_threads()
            decisions = []
            for i, (rows, label) in enumerate(ROW_BUCKETS):
                x = torch.randn(rows, k)

                def timings(x=x, rows=rows):
                    shape = (n, k, bias is not None, rows)
                    stock = functools.partial(torch.nn.functional.linear, x, weight, bias)
                    race = functools.partial(path_probe.race, functools.partial(kernel, x), stock)
                    return path_probe.cached_race("linear", build_id, shape, threads, race)

                # a prefill's rows take the kernel only where it gives MKL's bits; a decode's always may
                exact_here = exact or i < 2
                decisions.append(path_probe.decide(f"linear {n}x{k}, {label}", exact_here, timings))
            self.decisions[key] = tuple(decisions)
        return self.decisions[key]

    def _pack(self, module):
        """The forward that stands in for `module`'s: the kernel at the row counts the probe chose it for, the
        stock linear at the others; None where it is chosen for none."""
        with torch.inference_mode():
            weight = module.weight.detach()
            bias = None if module.bias is None else module.bias.detach()
            kernel = panel_linear.product(panel_linear.pack(weight), module.out_features, bias)
            exact = panel_linear.matches_stock(weight, bias, kernel)
            takes = tuple(d.kernel for d in self._decide(weight, bias, kernel, exact))
        if not any(takes):
            return None

        def forward(x: torch.Tensor) -> torch.Tensor:
            if takes[bucket(x.numel() // x.shape[-1])]:
                return kernel(x)
            return torch.nn.functional.linear(x, module.weight, module.bias)

        forward.kernel, forward.takes = kernel, takes
        forward.panels = kernel.panels
        forward.exact = takes[2]
        return forward

    def refresh(self) -> None:
        """Pack again any weight the caller changed since (load_state_dict, an optimizer step, a new Parameter):
        a stale copy would answer with the old model."""
        sources = [self._source(module) for module, _ in self.entries]
        if sources == self.packed_from:
            return
        entries, packed_from = [], []
        for (module, forward), source, was in zip(self.entries, sources, self.packed_from):
            if module.weight.device.type != "cpu" or module.weight.dtype != torch.float32:
                # the model moved or was cast: its stock linears from now on
                self.entries, self.packed_from = [], []
                self._for_rows.clear()
                self.version += 1
                return
            if source != was:
                forward = self._pack(module)
            if forward is not None:
                entries.append((module, forward))
                packed_from.append(source)
        self.entries, self.packed_from = entries, packed_from
        self._for_rows.clear()
        self.version += 1

    def for_rows(self, rows: int) -> dict:
        """module -> its kernel, for the linears that take the kernel at `rows` rows (the others run stock):
        chosen once per step by the step's row count, not per call (call `refresh` first in a step)."""
        index = bucket(rows)
        chosen = self._for_rows.get(index)
        if chosen is None:
            chosen = self._for_rows[index] = {m: f.kernel for m, f in self.entries if f.takes[index]}
        return chosen

    @property
    def exact_count(self) -> int:
        """Linears whose prefill-sized forwards take the kernel (it gives MKL's bits for them here)."""
        return sum(f.exact for _, f in self.entries)

    @property
    def exact_prefill(self) -> bool:
        """Every linear's prefill-sized forwards through the kernel, with MKL's bits."""
        return bool(self.entries) and self.exact_count == sum(self.shape_counts.values())

    def describe(self) -> list[str]:
        """A line per linear shape: how many, and the path of each row bucket with the probe's two timings."""
        lines = []
        for (n, k, bias, _exact), decisions in self.decisions.items():
            count = self.shape_counts.get((n, k), 0)
            lines.append(f"linears {n}x{k}{' +bias' if bias else ''} ({count}):")
            lines += [f"  {d.describe().split(', ', 1)[1]}" for d in decisions]
        return lines

    @property
    def nbytes(self) -> int:
        """Bytes of the kernel's panels."""
        return sum(f.panels.numel() * f.panels.element_size() for _, f in self.entries)

    @contextmanager
    def swapped_in(self):
        """The kernel's forwards in place of the linears' own for one forward of the engine."""
        self.refresh()
        # an instance attribute shadows nn.Linear.forward; written to __dict__ (Module.__setattr__ is slow)
        for module, forward in self.entries:
            module.__dict__["forward"] = forward
        try:
            yield
        finally:
            for module, _ in self.entries:
                module.__dict__.pop("forward", None)
