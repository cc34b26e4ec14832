"""Compile a C kernel of this folder once per machine and load it through ctypes.

The C needs no torch headers (pointers and sizes only), so a build is one `cc` call of about a second, not the
minute of a torch extension. It is compiled for the machine it runs on (-march=native: AVX-512 where there is
some, AVX2 or NEON elsewhere) and cached under the kvtui cache directory, keyed by the source, the flags, the
compiler and the CPU. OpenMP comes from the libgomp that torch has already loaded (same soname), so the kernel's
threads are torch's own and follow torch.set_num_threads.
No compiler, or a failed build: `load` answers None once, says why in `why_not`, and the caller keeps its
torch path. KVTUI_NO_KERNELS=1 does the same on purpose (a benchmark's baseline, a suspicion).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

FOLDER = Path(__file__).parent
# -ffp-contract=fast: a * b + c as one fused multiply-add, the rounding panel_linear.c must reproduce
FLAGS = ["-O3", "-fPIC", "-shared", "-fopenmp", "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast"]
# a kernel's own flags, after FLAGS (the last one wins): decode_ops.c and kv_quantize.c must round every
# operation as torch does
KERNEL_FLAGS = {"decode_ops": ["-ffp-contract=off"], "kv_quantize": ["-ffp-contract=off"]}
# -march=native is x86 and recent Arm; older Arm compilers spell it -mcpu=native
NATIVE = (["-march=native"], ["-mcpu=native"], [])
# KVTUI_MARCH=x86-64-v3 builds for that ISA instead of this machine's (an AVX2 build on an AVX-512 CPU)
MARCH_VARIABLE = "KVTUI_MARCH"


def _targets() -> tuple[list[str], ...]:
    """The -march choices to try in turn: KVTUI_MARCH's alone where it is set, else this machine's."""
    march = os.environ.get(MARCH_VARIABLE, "").strip()
    return ([f"-march={march}"],) if march else NATIVE


# name -> the loaded library, or None when it cannot be built here
_loaded: dict[str, ctypes.CDLL | None] = {}
# name -> why it is None
why_not: dict[str, str] = {}


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            return "".join(line for line in info if line.startswith(("model name", "flags", "Features")))
    except OSError:
        return platform.processor()


def _compiler() -> list[str] | None:
    """The C compiler's command: $CC (words, e.g. "ccache gcc"), else cc, gcc or clang on PATH."""
    if os.environ.get("CC"):
        return shlex.split(os.environ["CC"])
    found = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    return [found] if found else None


def _cache() -> Path:
    from engine.models.packaged import cache_dir

    return cache_dir() / "kernels"


def _sources(source: Path) -> str:
    """The text a build of `source` compiles: the file and the headers of this folder it may include."""
    headers = sorted(FOLDER.glob("*.h"))
    return "\0".join(path.read_text() for path in [source, *headers])


def _build(source: Path, compiler: list[str]) -> Path:
    version = subprocess.run([*compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    errors = []
    for native in _targets():
        flags = FLAGS + KERNEL_FLAGS.get(source.stem, []) + native
        key = hashlib.sha256(
            "\0".join([_sources(source), " ".join(flags), version, _cpu()]).encode()
        ).hexdigest()[:16]
        target = _cache() / f"{source.stem}-{key}.so"
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        # written beside its final name, then renamed: two processes building at once both end well
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            built = Path(scratch) / target.name
            done = subprocess.run(
                [*compiler, *flags, str(source), "-o", str(built), "-lm"],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode == 0:
                os.replace(built, target)
                return target
            # the first error line says what went wrong (the last is often a "note:")
            lines = done.stderr.strip().splitlines()
            first = next((line for line in lines if "error" in line), lines[0] if lines else "failed")
            errors.append(f"{' '.join(native) or 'no -march'}: {first.strip()}")
    raise RuntimeError(f"{' '.join(compiler)} could not build {source.name}: {'; '.join(errors)}")


def bind(name: str, argtypes: list, kernel: str | None = None) -> ctypes._CFuncPtr | None:
    """The function `name` of the kernel `kernel` (default: of that name), taking `argtypes` and answering an int
    status; None where the kernel cannot be built."""
    library = load(kernel or name)
    if library is None:
        return None
    function = getattr(library, name)
    function.restype = ctypes.c_int
    function.argtypes = argtypes
    return function


def load(name: str) -> ctypes.CDLL | None:
    """The compiled kernel `name` (the file name.c beside this one), built on first use; None where it cannot
    be (why_not[name] says why)."""
    if name in _loaded:
        return _loaded[name]
    library = None
    if os.environ.get("KVTUI_NO_KERNELS") == "1":
        why_not[name] = "KVTUI_NO_KERNELS=1"
    elif (compiler := _compiler()) is None:
        why_not[name] = "no C compiler (cc, gcc or clang) on PATH"
    else:
        # torch first: its libgomp is then the one the kernel binds to
        import torch  # noqa: F401

        try:
            library = ctypes.CDLL(str(_build(FOLDER / f"{name}.c", compiler)))
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            why_not[name] = str(exc)
    _loaded[name] = library
    return library


def build_id(name: str) -> str:
    """The loaded build of kernel `name` (its file's stem: the source, flags, compiler and CPU hashed); '' where it
    is not built."""
    library = load(name)
    return Path(library._name).stem if library is not None else ""


def target() -> str:
    """The ISA the kernels are built for: KVTUI_MARCH's, or this machine's own."""
    return os.environ.get(MARCH_VARIABLE, "").strip() or "native"
