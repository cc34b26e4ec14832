"""Random keys on every app and view (tests/helpers/ui_fuzz.py): no key sequence may crash or end the app.

The short run here presses a few hundred keys in all. The long run, by hand, at low priority:

    KVTUI_FUZZ_PRESSES=20000 nice -n 19 pytest tests/kvtui/test_ui_fuzz.py -x -q

KVTUI_FUZZ_PRESSES is the total over the cases below (split evenly), KVTUI_FUZZ_SEED the base seed (0). A
failure names its target, terminal size, session seed and keys; the same seed gives the same keys.
"""

from __future__ import annotations

import os

import pytest

from tests.helpers.ui_fuzz import (
    ATTACH,
    TRACES,
    attach_target,
    fuzz,
    live_target,
    mooncake_whatif_trace,
    replay_target,
)

pytestmark = pytest.mark.anyio

SIZES = [(80, 24), (120, 40)]
TARGETS = [
    "edit_series",
    "gemma3_hybrid_window",
    "gemma3_paged_groups",
    "host_tier",
    "whatif",
    "attach",
    "live",
]
# per case in the normal test suite
SHORT = {
    "edit_series": 20,
    "gemma3_hybrid_window": 20,
    "gemma3_paged_groups": 20,
    "host_tier": 20,
    "whatif": 20,
    "attach": 20,
    "live": 20,
}
TOTAL = int(os.environ.get("KVTUI_FUZZ_PRESSES", "0"))
BASE_SEED = int(os.environ.get("KVTUI_FUZZ_SEED", "0"))
ATTACH_TRACES = sorted(ATTACH.glob("*.jsonl"))


def _presses(name: str) -> int:
    return TOTAL // (len(TARGETS) * len(SIZES)) if TOTAL else SHORT[name]


@pytest.fixture(scope="module")
def whatif_trace(tmp_path_factory):
    return mooncake_whatif_trace(tmp_path_factory.mktemp("whatif"))


def _target(name: str, whatif_trace, size):
    if name == "whatif":
        return replay_target(whatif_trace)
    if name == "attach":
        # one attach trace per size in the short run; the long run walks them all
        return [attach_target(path) for path in ATTACH_TRACES]
    if name == "live":
        return live_target()
    return replay_target(TRACES / f"{name}.jsonl")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", TARGETS)
async def test_random_keys_never_crash_the_app(name, size, whatif_trace):
    targets = _target(name, whatif_trace, size)
    if not isinstance(targets, list):
        targets = [targets]
    elif not TOTAL:
        targets = [targets[SIZES.index(size) % len(targets)]]
    presses = max(1, _presses(name) // len(targets))
    for target in targets:
        result = await fuzz(target, size, presses, BASE_SEED)
        print(
            f"fuzz {target.name} {size[0]}x{size[1]}: {result.presses} keys, {result.sessions} sessions, "
            f"{result.quits} quits"
        )
        if result.failures:
            pytest.fail(result.failures[0], pytrace=False)
