"""stack_runs.c, the slot tree's loop of stack_pass.py, compiled at first use with the machine's C compiler
(one `cc` call of well under a second, cached by the source's hash) and called through ctypes: the loop is
one Fenwick query or update per run, which Python runs at a few microseconds each. Where there is no compiler
or the build fails, `stack_runs()` is None and stack_pass.py runs the same loop in Python (the figures are the
same; tests/kvtui/whatif/test_stack_kernel.py compares them). KVTUI_NO_KERNELS=1 picks Python on purpose.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("stack_runs.c")
_loaded: list = []
# why the kernel is not there, when it is not
why_not: list[str] = []


def _cache() -> Path:
    root = os.environ.get("KVTUI_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kvtui"
    )
    return Path(root) / "kernels"


def _build(compiler: str) -> Path:
    key = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    target = _cache() / f"stack_runs-{key}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # built beside its final name, then renamed: two processes building at once both end well
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        done = subprocess.run(
            [compiler, "-O2", "-fPIC", "-shared", str(SOURCE), "-o", str(built)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode:
            raise RuntimeError(f"{compiler} could not build {SOURCE.name}: {done.stderr.strip()[:200]}")
        os.replace(built, target)
    return target


def stack_runs():
    """The C loop (ctypes function), or None where it cannot be built here."""
    if _loaded:
        return _loaded[0]
    function = None
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if os.environ.get("KVTUI_NO_KERNELS") == "1":
        why_not.append("KVTUI_NO_KERNELS=1")
    elif compiler is None:
        why_not.append("no C compiler (cc, gcc or clang) on PATH")
    else:
        try:
            function = ctypes.CDLL(str(_build(compiler))).stack_runs
            pointer = ctypes.c_void_p
            function.restype = ctypes.c_int
            # tree, size, live; the six arrays; busy_count, first_index; out, live_out
            int64 = ctypes.c_int64
            function.argtypes = [pointer, int64, int64, *[pointer] * 6, int64, int64, pointer, pointer]
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            why_not.append(str(exc))
            function = None
    _loaded.append(function)
    return function
