"""The paths that make production-size workloads fast: the curve built a request at a time (its tree grows
past its first size), a Mooncake file streamed into it, block keys made from hash ids, the ceiling read off
the curve, and sweeps run side by side (forked processes, Ray) giving exactly the serial figures."""

from __future__ import annotations

import random

import pytest

from engine.core.hashing import block_hashes
from kvtui.whatif import onepass
from kvtui.whatif.curve import lru_curve, simulate_lru
from kvtui.whatif.jobs import run_jobs
from kvtui.whatif.loaders import load
from kvtui.whatif.optimal import belady
from kvtui.whatif.runs import SimJob, simulated_job
from kvtui.whatif.simulate import SimConfig, simulate
from kvtui.whatif.stream import OutOfOrder, one_pass_file
from kvtui.whatif.sweep import SweepOptions, run_sweep, sweep_configs
from kvtui.whatif.synth import MooncakeLikeConfig, mooncake_like, write_jsonl


def synth(tmp_path, requests=300, seed=3):
    records = mooncake_like(seed, MooncakeLikeConfig(requests=requests, duration_ms=600_000))
    return write_jsonl(records, tmp_path / "m.jsonl")


def test_the_curve_past_its_first_tree_equals_plain_simulation():
    # 3,000 requests: the slot tree doubles twice while the curve is built
    rng = random.Random(7)
    requests = []
    for _ in range(3000):
        if requests and rng.random() < 0.6:
            base = rng.choice(requests[-200:])
            head = base[: rng.randint(0, len(base))]
        else:
            head = []
        requests.append(head + [rng.randrange(400) for _ in range(rng.randint(0, 3))])
    curve = lru_curve(requests)
    for capacity in (1, 5, 40, 300, 2000, curve.distinct_blocks):
        assert curve.hits(capacity) == simulate_lru(requests, capacity).hit_blocks, capacity


@pytest.mark.parametrize("block_size", [512, 128, 1024])
def test_a_streamed_file_gives_the_loaded_workloads_curve(tmp_path, block_size):
    path = synth(tmp_path)
    summary, ones = one_pass_file(path, [block_size], 512)
    loaded = load(path)
    streamed, whole = ones[block_size].curve(), onepass.lru_curve_of(loaded, block_size)
    assert summary.num_requests == loaded.num_requests and summary.prompt_tokens == loaded.prompt_tokens
    assert streamed.block_cum == whole.block_cum and streamed.total_tokens == whole.total_tokens


@pytest.mark.parametrize("block_size", [512, 128, 1024])
def test_keys_made_from_hash_ids_name_the_blocks_token_hashes_name(tmp_path, block_size):
    # the engine's chained hashes of the made-up tokens: the independent way to name the same blocks
    loaded = load(synth(tmp_path, requests=120))
    by_ids = onepass.lru_curve_of(loaded, block_size)
    by_tokens = lru_curve(
        [
            block_hashes(r.prompt_token_ids()[: r.num_prompt_tokens // block_size * block_size], block_size)[
                0
            ]
            for r in loaded.requests
        ],
        matchable=[(r.num_prompt_tokens - 1) // block_size for r in loaded.requests],
    )
    assert by_ids.block_cum == by_tokens.block_cum


def test_a_file_out_of_arrival_order_is_not_streamed(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"timestamp": 5, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'
        '{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'
    )
    with pytest.raises(OutOfOrder):
        one_pass_file(path, [512], 512)


def test_the_one_pass_reports_ceiling_and_bound_equal_independent_simulations(tmp_path):
    loaded = load(synth(tmp_path, requests=150))
    bs = 512
    caps = [40 * bs, 200 * bs, 1000 * bs]
    configs = sweep_configs({bs: caps}, [bs], ["lru"], [(8192, 256)], [True], SweepOptions().cost)
    report = run_sweep(loaded, configs, SweepOptions(method="one-pass", quiet=True))
    keys = [onepass.request_keys(r, bs) for r in loaded.requests]
    matchable = [(r.num_prompt_tokens - 1) // bs for r in loaded.requests]
    prompt = loaded.prompt_tokens
    # the ceiling: a plain LRU simulation with room for every block
    infinite = simulate_lru(keys, 10**9, matchable=matchable)
    assert report["ceiling"] == {"token_hit_rate": infinite.hit_blocks * bs / prompt, "source": "one-pass"}
    # the bound: Belady simulated on the keys directly
    expected = [
        p.hit_blocks * bs / prompt for p in belady(keys, [c // bs for c in caps], matchable=matchable)
    ]
    assert [o["token_hit_rate"] for o in report["optimal"]] == expected
    # and the engine's own run with room for everything, one request at a time, serves what the ceiling says
    one_at_a_time = [r for r in loaded.requests]
    for i, r in enumerate(one_at_a_time):
        r.arrival = 1000.0 * i
    full = simulate(one_at_a_time, SimConfig(10**7 // bs * bs, bs, partial_hits=False), hash_ids=True)
    assert full.hit_tokens == infinite.hit_blocks * bs


def test_a_parallel_sweep_equals_the_serial_one():
    loaded = load("fixtures/traces/shared_system_8users.jsonl")
    jobs = [SimJob(SimConfig(c, 16), want_hits=True) for c in (128, 256, 1024)]
    shared = (loaded.requests, False)
    serial = run_jobs(simulated_job, shared, jobs, 1)
    parallel = run_jobs(simulated_job, shared, jobs, 2)
    for a, b in zip(serial, parallel):
        a["point"].pop("wall_seconds"), b["point"].pop("wall_seconds")
        assert a == b


# a Ray head on loopback takes seconds: with the slow remainder (tests/conftest.py)
@pytest.mark.slow
def test_a_sweep_on_ray_equals_the_serial_one():
    ray = pytest.importorskip("ray", reason="ray is not installed here (pip install 'kvtui[ray]')")
    import shutil
    import tempfile

    loaded = load("fixtures/traces/shared_system_8users.jsonl")
    jobs = [SimJob(SimConfig(c, 16)) for c in (128, 1024)]
    shared = (loaded.requests, False)
    serial = run_jobs(simulated_job, shared, jobs, 1)
    # a local head on loopback, started for this test and stopped after it (a short directory: Ray's socket
    # paths must fit 107 characters)
    scratch = tempfile.mkdtemp(prefix="kvray", dir="/tmp")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=scratch,
        log_to_driver=False,
    )
    try:
        remote = run_jobs(simulated_job, shared, jobs, ray_address="auto")
    finally:
        ray.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    for a, b in zip(serial, remote):
        a["point"].pop("wall_seconds"), b["point"].pop("wall_seconds")
        assert a == b
