"""The kernels' exactness tests again, in a process whose kernels are built for AVX2 (KVTUI_MARCH=x86-64-v3), so
that the register blocking of the ISA this machine does not run natively stays exact too. On a CPU without
AVX-512 the suite's own run already is that build."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.worker.path_probe import machine

ROOT = Path(__file__).resolve().parents[3]
EXACTNESS = [
    "tests/engine/worker/test_exactness.py",
    "tests/engine/worker/test_fused_forward.py",
    "tests/engine/worker/test_quantized_paths.py",
    "tests/engine/worker/test_paged_decode_kernel.py",
    "tests/engine/worker/test_panel_linear_kernel.py",
    "tests/engine/worker/test_packed_linear.py",
]


def _flags() -> set[str]:
    return set(machine().rpartition("[")[2].rstrip("]").split())


@pytest.mark.skipif(
    not {"avx512f", "avx2", "fma", "f16c"} <= _flags(), reason="runs where AVX-512 is native and AVX2 can run"
)
def test_the_exactness_tests_pass_with_kernels_built_for_avx2():
    env = os.environ | {"KVTUI_MARCH": "x86-64-v3", "KVTUI_PATHS": "kernel"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *EXACTNESS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]


def test_an_avx2_build_computes_in_eight_lanes():
    if "avx2" not in _flags():
        pytest.skip("no AVX2 here")
    code = "from engine.worker.kernels import panel_linear; print(panel_linear.lanes())"
    env = os.environ | {"KVTUI_MARCH": "x86-64-v3"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.stdout.strip() == "8", done.stderr[-2000:]
