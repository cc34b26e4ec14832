"""The sampled curve split into hash ranges (sample_ranges.py): one range is the plain sampled pass, N ranges
give the same curve in this process, in N processes and on a Ray cluster started on loopback, and what every
task is sent is the file's name, not its requests."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from kvtui.whatif.sample_ranges import RangeSpec, ranged_passes
from kvtui.whatif.stream import one_pass_file
from kvtui.whatif.synth_stream import write_stream


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("ranges") / "w.kvblk"
    write_stream(str(path), 300_000, seed=4, fmt="blocks")
    return str(path)


def spec_of(trace: str, parts: int) -> RangeSpec:
    return RangeSpec(trace, "blocks", (512,), 512, 0.05, 7, parts)


def figures(curve) -> tuple:
    return (bytes(curve.block_cum), bytes(curve.error_cum), curve.total_blocks, curve.distinct_blocks)


def test_one_range_is_the_plain_sampled_pass(trace):
    _, ones = one_pass_file(trace, [512], 512, keep_chains=False, fmt="blocks", sample=0.05, seed=7)
    _, passes = ranged_passes(spec_of(trace, 1))
    assert figures(passes[512].curve()) == figures(ones[512].curve())


def test_two_ranges_in_two_processes_equal_them_here(trace):
    summary, here = ranged_passes(spec_of(trace, 2), jobs=1)
    _, forked = ranged_passes(spec_of(trace, 2), jobs=2)
    assert figures(here[512].curve()) == figures(forked[512].curve())
    assert summary.num_requests > 10_000 and here[512].references > 250_000


def test_two_ranges_are_close_to_the_exact_curve(trace):
    _, exact = one_pass_file(trace, [512], 512, keep_chains=False, fmt="blocks")
    truth = exact[512].curve()
    _, passes = ranged_passes(spec_of(trace, 2))
    estimate = passes[512].curve()
    capacities = np.unique(np.geomspace(200, truth.distinct_blocks, 40).astype(np.int64))
    assert max(abs(estimate.hit_rate(c) - truth.hit_rate(c)) for c in capacities) < 0.02


def test_a_task_is_sent_the_files_name_not_its_requests(trace):
    assert len(pickle.dumps(spec_of(trace, 2))) < 1000


# a Ray head on loopback takes seconds: with the slow remainder (tests/conftest.py)
@pytest.mark.slow
def test_ranges_on_ray_equal_them_here(trace):
    ray = pytest.importorskip("ray", reason="ray is not installed here (pip install 'kvtui[ray]')")
    import shutil
    import tempfile

    _, here = ranged_passes(spec_of(trace, 2))
    # a head on loopback with 2 workers, started for this test and stopped after it (a short directory:
    # Ray's socket paths must fit 107 characters)
    scratch = tempfile.mkdtemp(prefix="kvray", dir="/tmp")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=scratch,
        log_to_driver=False,
    )
    try:
        _, remote = ranged_passes(spec_of(trace, 2), jobs=2, ray_address="auto")
    finally:
        ray.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    assert figures(remote[512].curve()) == figures(here[512].curve())


def test_whatif_with_jobs_samples_in_ranges(trace):
    import json

    from click.testing import CliRunner

    from kvtui.cli import main

    args = [trace, "--method", "one-pass", "--sample", "0.05", "--seed", "7", "--capacity", "1M,10M"]
    result = CliRunner().invoke(main, ["whatif", *args, "--jobs", "2", "--json", "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    _, passes = ranged_passes(spec_of(trace, 2))
    curve = passes[512].curve()
    for point in report["points"]:
        blocks = point["capacity_tokens"] // 512
        assert point["token_hit_rate"] == curve.hit_tokens(blocks) / report["prompt_tokens"]
        assert point["token_hit_rate_error"] == curve.hit_rate_error(blocks)
    assert any(note.startswith("sampled: SHARDS over 5%") for note in report["notes"])
