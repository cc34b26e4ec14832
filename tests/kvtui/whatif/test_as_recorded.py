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
    assert "7 of 7 prefix lookups got exactly the engine's hit tokens" in result.output
    refused = CliRunner().invoke(main, ["whatif", "fixtures/traces/synthetic_small.jsonl", "--as-recorded"])
    assert refused.exit_code == 1 and "not a trace of kvtui's engine" in refused.output
