"""The whole suite.

The engine's kernel-or-torch choices are forced to the C kernels (wherever they are exact), so that what a test
runs does not depend on how fast this machine happened to be when a probe timed it
(engine/worker/path_probe.py; tests/engine/worker/test_path_probe.py tests the probe itself).

Two runs (docs/architecture.md, "Tests"): `pytest` runs every package's tests in a few minutes; `pytest -m slow`
runs the slow remainder, marked here by file: the real models (SmolLM2, Gemma 3, MiniLM) end to end, the
real-vLLM integration, the exactness tests again on an AVX2 build, the install in a fresh venv, the real-model
walkthrough; and by test (`@pytest.mark.slow`): the Ray clusters on loopback, `kvtui bench attach` end to end, the
fleet app over two collector servers. CI runs both, and the property tests and the key fuzz again at their long budgets.
"""

import os
from pathlib import Path

import pytest

os.environ.setdefault("KVTUI_PATHS", "kernel")

ROOT = Path(__file__).resolve().parent.parent
SLOW = (
    "tests/engine/models/test_smollm2.py",
    "tests/engine/models/test_gemma3.py",
    "tests/engine/models/test_edit_reach.py",
    "tests/engine/worker/test_lower_isa.py",
    "tests/integration/",
    "tests/walkthrough/",
    "tests/test_install_without_torch.py",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.fspath)).resolve().relative_to(ROOT).as_posix()
        if any(path == slow or (slow.endswith("/") and path.startswith(slow)) for slow in SLOW):
            item.add_marker(pytest.mark.slow)
