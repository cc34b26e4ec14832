"""Which path of an operation runs on this machine: the C kernel or torch's own op, decided by timing both on the
model's real shapes, once per machine.

The kernels were tuned on one CPU; on another (no AVX-512, another BLAS) torch's op can be the faster one. So
the C path is taken only where it is exact and at least `MARGIN` faster than torch's, measured here; torch's op
is transformers' own code and exact by construction. A probe is a few short rounds of both, alternating, the
best of each kept. Its timings are kept in kvtui's cache folder (`probes/`), keyed by the CPU model, its vector
ISA flags, the kernel's build, the shape and the thread count, so a later start reads them instead of timing.

KVTUI_PATHS forces the choice, for tests and benchmarks: `kernel` takes the C path wherever it is exact,
`torch` takes torch's op everywhere; unset (or `measure`) lets the probe decide.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

FORCE_VARIABLE = "KVTUI_PATHS"
FORCES = ("kernel", "torch", "measure")
# the kernel must beat torch's op by this share of torch's time to be chosen
MARGIN = 0.05
# seconds of each path a probe runs at least (a shape of a few microseconds runs many times)
PROBE_SECONDS = 0.02
# the vector ISA flags that decide how a kernel and a BLAS run (x86 /proc/cpuinfo flags, Arm features)
ISA_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx2", "fma", "f16c", "avx", "sse4_2", "asimd", "sve")


@dataclass(frozen=True)
class Decision:
    """One operation at one shape: the two timings (None where not measured) and the path taken."""

    operation: str
    kernel: bool
    kernel_s: float | None = None
    torch_s: float | None = None
    # why, where the timings alone do not say: "KVTUI_PATHS=torch", "not exact here"
    reason: str = ""

    def describe(self) -> str:
        taken = "kernel" if self.kernel else "torch"
        if self.kernel_s is None or self.torch_s is None:
            return f"{self.operation}: {taken} ({self.reason})"
        timings = f"kernel {_time(self.kernel_s)}, torch {_time(self.torch_s)}"
        return f"{self.operation}: {taken} ({timings}{'; ' + self.reason if self.reason else ''})"


def _time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def forced() -> str:
    """KVTUI_PATHS as given ("measure" where unset); a value it does not know is refused in one line."""
    value = os.environ.get(FORCE_VARIABLE, "").strip() or "measure"
    if value not in FORCES:
        raise ValueError(f"{FORCE_VARIABLE}={value!r}: use one of {', '.join(FORCES)} (or leave it unset)")
    return value


def faster(kernel_s: float, torch_s: float, margin: float = MARGIN) -> bool:
    """Whether the kernel's time beats torch's by `margin` of torch's time."""
    return kernel_s <= torch_s * (1 - margin)


def decide(operation: str, exact: bool, timings) -> Decision:
    """The path for `operation`: forced by KVTUI_PATHS, else the kernel where it is exact and `faster` by the
    timings (a callable answering (kernel_s, torch_s), called only when they decide)."""
    force = forced()
    if not exact:
        return Decision(operation, False, reason="the kernel does not give torch's bits here")
    if force != "measure":
        return Decision(operation, force == "kernel", reason=f"{FORCE_VARIABLE}={force}")
    kernel_s, torch_s = timings()
    return Decision(operation, faster(kernel_s, torch_s), kernel_s, torch_s)


def race(kernel, torch_op, seconds: float = PROBE_SECONDS) -> tuple[float, float]:
    """(kernel's, torch's) best time of one call, over rounds that alternate the two (a machine's speed drifts:
    alternating gives both the same drift), each path run for at least `seconds` in all."""
    calls = (kernel, torch_op)
    for call in calls:
        call()
    best = [float("inf"), float("inf")]
    spent = [0.0, 0.0]
    rounds = 0
    while rounds < 3 or min(spent) < seconds:
        for i in (0, 1) if rounds % 2 == 0 else (1, 0):
            start = time.perf_counter()
            calls[i]()
            took = time.perf_counter() - start
            best[i] = min(best[i], took)
            spent[i] += took
        rounds += 1
        if rounds >= 1000:
            break
    return best[0], best[1]


@functools.cache
def machine() -> str:
    """The CPU model and its vector ISA flags, as a probe's key reads them."""
    model, flags = "", set()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                name, _, value = line.partition(":")
                if name.strip() == "model name" and not model:
                    model = value.strip()
                elif name.strip() in ("flags", "Features"):
                    flags |= set(value.split())
    except OSError:
        pass
    isa = " ".join(flag for flag in ISA_FLAGS if flag in flags)
    return f"{model or platform.processor() or platform.machine()} [{isa}]"


def _folder() -> Path:
    from engine.models.packaged import cache_dir

    return cache_dir() / "probes"


def cache_key(kind: str, build: str, shape: tuple, threads: int) -> str:
    """The file name a probe's timings are kept under: the machine, the kernel's build, the shape, the threads."""
    text = "\0".join([machine(), kind, build, repr(tuple(shape)), str(threads)])
    return f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def cached_race(kind: str, build: str, shape: tuple, threads: int, run) -> tuple[float, float]:
    """The (kernel's, torch's) timings `run` answers (a `race` of the two), or those kept from an earlier race with
    the same key."""
    path = _folder() / f"{cache_key(kind, build, shape, threads)}.json"
    try:
        kept = json.loads(path.read_text())
        return float(kept["kernel_s"]), float(kept["torch_s"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    kernel_s, torch_s = run()
    record = {"machine": machine(), "build": build, "shape": list(shape), "threads": threads}
    record |= {"kernel_s": kernel_s, "torch_s": torch_s}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(json.dumps(record))
        os.replace(scratch, path)
    except OSError:
        # a read-only cache: the timings hold for this run
        pass
    return kernel_s, torch_s
