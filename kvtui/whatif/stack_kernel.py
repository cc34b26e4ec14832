"""The one pass's C loops, compiled at first use with the machine's C compiler (one `cc` call of well under a
second each, cached by the source's hash) and called through ctypes:

    stack_runs.c  the slot tree's loop of stack_pass.py, one Fenwick query or update per run, which Python
                  runs at a few microseconds each
    top_stack.c   the exact top of the stack beside a sampled pass (top_stack.py)

Where there is no compiler or a build fails, the function is None and the callers run the same figures
another way (stack_pass.py's loop in Python; top_stack.py's exact pass over every block):
tests/kvtui/whatif/test_stack_kernel.py and test_top_stack.py compare them. KVTUI_NO_KERNELS=1 picks those
on purpose.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCES = {name: Path(__file__).with_name(f"{name}.c") for name in ("stack_runs", "top_stack")}
_loaded: dict = {}
# why a kernel is not there, when it is not
why_not: list[str] = []

_P, _I64 = ctypes.c_void_p, ctypes.c_int64


def _cache() -> Path:
    root = os.environ.get("KVTUI_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kvtui"
    )
    return Path(root) / "kernels"


def _build(compiler: str, source: Path) -> Path:
    key = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    target = _cache() / f"{source.stem}-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # built beside its final name, then renamed: two processes building at once both end well
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        done = subprocess.run(
            [compiler, "-O2", "-fPIC", "-shared", str(source), "-o", str(built)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode:
            raise RuntimeError(f"{compiler} could not build {source.name}: {done.stderr.strip()[:200]}")
        os.replace(built, target)
    return target


def _library(name: str):
    """The built library of SOURCES[name], or None where it cannot be built here (the reason in why_not)."""
    if name in _loaded:
        return _loaded[name]
    library = None
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if os.environ.get("KVTUI_NO_KERNELS") == "1":
        why_not.append("KVTUI_NO_KERNELS=1")
    elif compiler is None:
        why_not.append("no C compiler (cc, gcc or clang) on PATH")
    else:
        try:
            library = ctypes.CDLL(str(_build(compiler, SOURCES[name])))
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            why_not.append(str(exc))
    _loaded[name] = library
    return library


def _typed(function, restype, argtypes):
    function.restype, function.argtypes = restype, argtypes
    return function


def stack_runs():
    """The slot tree's C loop (a ctypes function), or None where it cannot be built here."""
    library = _library("stack_runs")
    if library is None:
        return None
    # tree, size, live; the six arrays; busy_count, first_index; out, live_out
    return _typed(library.stack_runs, ctypes.c_int, [_P, _I64, _I64, *[_P] * 6, _I64, _I64, _P, _P])


def top_stack():
    """The exact top's C functions (new, add, free, held), or None where they cannot be built here."""
    library = _library("top_stack")
    if library is None:
        return None
    return (
        _typed(library.top_stack_new, _P, [_I64]),
        # stack, hashes, starts, requests, may_hit, hist
        _typed(library.top_stack_add, ctypes.c_int, [_P, _P, _P, _I64, _P, _P]),
        _typed(library.top_stack_free, None, [_P]),
        _typed(library.top_stack_held, _I64, [_P]),
    )
