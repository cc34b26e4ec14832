"""The whole suite: the engine's kernel-or-torch choices forced to the C kernels (wherever they are exact), so
that what a test runs does not depend on how fast this machine happened to be when a probe timed it
(engine/worker/path_probe.py; tests/engine/worker/test_path_probe.py tests the probe itself)."""

import os

os.environ.setdefault("KVTUI_PATHS", "kernel")
