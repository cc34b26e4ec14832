"""`kvtui bench attach` runs end to end (a short, slow run: speed is the benchmark's business, not a test's)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kvtui.bench.attach import make_batches
from kvtui.cli import main
from kvtui.sources.wire import decode_payload


def test_bench_payloads_are_the_wire_and_count_their_blocks():
    payloads = make_batches(2_000, pool=300, run=4)
    events = [e.as_dict() for p in payloads for e in decode_payload(p).events]
    # the last run may overshoot
    assert 2_000 <= sum(len(e["hashes"]) for e in events) < 2_000 + 2 * 4
    assert {e["type"] for e in events} == {"kv_block_stored", "kv_block_removed"}


# the benchmark end to end: with the slow remainder (tests/conftest.py)
@pytest.mark.slow
def test_bench_attach_runs():
    result = CliRunner().invoke(
        main, ["bench", "attach", "--seconds", "1.5", "--rate", "3000", "--pool", "500"]
    )
    assert result.exit_code == 0, result.output
    for key in ("received_blocks_per_s", "applied_blocks_per_s", "frame", "baseline_blocks_per_s"):
        assert key in result.output
