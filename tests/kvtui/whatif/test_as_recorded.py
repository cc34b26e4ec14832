"""`kvtui whatif --as-recorded`: an engine trace run again through the engine core at the engine's own settings,
arrivals, edits, forks and aborts by step, finds exactly the engine's prefix hits, lookup by lookup: on every
engine trace in fixtures/traces/ and on fresh traces of random scenarios (tiny models, pool pressure, n > 1)."""

from pathlib import Path

import pytest

from kvtui.whatif.as_recorded import compare, read_recorded
from tests.helpers.engine_scenarios import random_scenario, run_engine

FIXTURES = sorted(Path("fixtures/traces").glob("*.jsonl"))
# written by tests/synthetic.py's generator, not by the engine: it has no engine settings to run again
NOT_ENGINE = {"synthetic_small.jsonl"}


@pytest.mark.parametrize("path", [p for p in FIXTURES if p.name not in NOT_ENGINE], ids=lambda p: p.name)
def test_every_fixture_trace_gets_the_engines_hits_on_every_lookup(path):
    result = compare(path)
    assert result.lookups > 0
    assert result.differ == []
    assert result.equal == result.lookups


def test_a_trace_not_written_by_the_engine_is_refused():
    with pytest.raises(ValueError, match="not a trace of kvtui's engine"):
        read_recorded(Path("fixtures/traces") / "synthetic_small.jsonl")


@pytest.mark.parametrize("seed", range(12))
def test_random_engine_traces_with_forks_samples_edits_and_aborts(seed, tmp_path):
    path = tmp_path / "run.jsonl"
    run_engine(random_scenario(seed), trace_path=path)
    result = compare(path)
    assert result.differ == [] and result.equal == result.lookups


def test_the_command_says_how_many_lookups_match_and_refuses_other_traces():
    from click.testing import CliRunner

    from kvtui.cli import main

    result = CliRunner().invoke(main, ["whatif", "fixtures/traces/edit_series.jsonl", "--as-recorded"])
    assert result.exit_code == 0
    assert (
        # one request, edited six times: each edit is a lookup again
        "7 of 7 prefix lookups got exactly the engine's hit tokens (1 at admission, 6 again" in result.output
    )
    refused = CliRunner().invoke(main, ["whatif", "fixtures/traces/synthetic_small.jsonl", "--as-recorded"])
    assert refused.exit_code == 1 and "not a trace of kvtui's engine" in refused.output


def test_every_lookup_is_compared_the_ones_after_a_preemption_too(tmp_path):
    """A trace whose requests were preempted and looked up again: --as-recorded counts and compares every
    lookup. The trace is concurrent8 run again in a pool of 8 blocks (-o writes the re-run), where 8 requests
    of 4 blocks each preempt one another."""
    import json

    from click.testing import CliRunner

    from kvtui.cli import main

    lines = Path("fixtures/traces/concurrent8.jsonl").read_text().splitlines()
    small = tmp_path / "small_pool.jsonl"
    small.write_text("\n".join([json.dumps({**json.loads(lines[0]), "num_blocks": 8}), *lines[1:]]) + "\n")
    rerun = tmp_path / "rerun.jsonl"
    written = CliRunner().invoke(main, ["whatif", str(small), "--as-recorded", "-o", str(rerun)])
    assert f"wrote {rerun}" in written.output
    events = [json.loads(line) for line in rerun.read_text().splitlines()[1:]]
    lookups = [e for e in events if e["type"] == "prefix_match"]
    again = [e for e in lookups if e["detail"].get("readmission")]
    assert len(again) > 0 and len(lookups) == 8 + len(again)
    result = CliRunner().invoke(main, ["whatif", str(rerun), "--as-recorded"])
    assert result.exit_code == 0, result.output
    assert (
        f"{len(lookups)} of {len(lookups)} prefix lookups got exactly the engine's hit tokens "
        f"(8 at admission, {len(again)} again after a preemption or an edit" in result.output
    )
    report = json.loads(CliRunner().invoke(main, ["whatif", str(rerun), "--as-recorded", "--json"]).output)
    assert report["lookups"] == report["equal"] == len(lookups) and report["again"] == len(again)
