"""The one pass in compact arrays (block_table.py, stack_pass.py) and its SHARDS sample (sampled.py): the exact
curve equals the plain simulation on a generated workload, small batches change nothing, memory is a few
dozen bytes a distinct block, and the sample at rate 1 is the exact curve (test_sampled.py: below 1)."""

from __future__ import annotations

import random
import tracemalloc

import numpy as np

from kvtui.whatif import onepass
from kvtui.whatif.block_table import PrefixTable, prefix_hashes
from kvtui.whatif.curve import simulate_lru
from kvtui.whatif.requests import SimRequest, Workload
from kvtui.whatif.synth import MooncakeLikeConfig, mooncake_like


def generated(requests: int, seed: int = 5, block: int = 512) -> Workload:
    records = mooncake_like(seed, MooncakeLikeConfig(requests=requests, duration_ms=requests * 300))
    items = [
        SimRequest(
            f"r{i}",
            r["timestamp"] / 1000,
            None,
            None,
            r["output_length"],
            hash_ids=r["hash_ids"],
            input_length=r["input_length"],
            trace_block_size=block,
        )
        for i, r in enumerate(records)
    ]
    return Workload("synth", "mooncake", items)


def test_the_table_gives_one_node_per_prefix():
    table = PrefixTable(capacity=8)
    keys = np.array([1, 2, 1, 3, 2, 1, 2, 9], dtype=np.int64)
    starts = np.array([0, 2, 4, 5, 8], dtype=np.int64)
    nodes = table.intern(keys, starts).tolist()
    # [1,2] [1,3] [2] [1,2,9]: key 2 under 1 and alone are two blocks; the table grew past 8 slots
    assert nodes[0:2] == nodes[5:7] and nodes[2] == nodes[0]
    assert len({nodes[1], nodes[3], nodes[4]}) == 3 and len(table) == 5


def test_prefix_hashes_name_the_whole_prefix():
    keys = np.array([7, 8, 7, 8, 6, 8], dtype=np.int64)
    starts = np.array([0, 2, 4, 6], dtype=np.int64)
    h = prefix_hashes(keys, starts).tolist()
    assert h[0:2] == h[2:4] and h[5] != h[1] and len(set(h)) == 4


def test_the_compact_curve_equals_plain_lru_on_a_generated_workload():
    # 5,000 requests: the slot tree doubles three times, past 4,096 slots
    workload = generated(5000)
    bs = 512
    keys = [onepass.request_keys(r, bs) for r in workload.requests]
    matchable = [(r.num_prompt_tokens - 1) // bs for r in workload.requests]
    # small batches: the slot tree, the table and the histogram all grow between batches
    one = onepass.OnePass(bs, batch_blocks=20_000)
    for request in workload.requests:
        one.add_request(request)
    curve = one.curve()
    whole = onepass.lru_curve_of(workload, bs)
    assert curve == whole
    for capacity in (1, 100, 2048, 20_000, curve.distinct_blocks):
        assert curve.hits(capacity) == simulate_lru(keys, capacity, matchable=matchable).hit_blocks


def test_memory_is_a_few_dozen_bytes_a_distinct_block():
    workload = generated(3000)
    one = onepass.OnePass(512, keep_chains=False, batch_blocks=1 << 14)
    tracemalloc.start()
    for request in workload.requests:
        one.add_request(request)
    one.curve()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    distinct = one.distinct_blocks
    assert distinct > 20_000
    # the table (at most 60% full, doubling), last slots and histogram; plus one batch's temporaries
    assert peak < 80 * distinct + 8_000_000, (peak, distinct)


def test_a_sample_at_rate_one_is_the_exact_curve():
    workload = generated(600)
    exact = onepass.lru_curve_of(workload, 512)
    sampled = onepass.of_workload(workload, 512, sample=1.0).curve()
    assert sampled.block_cum == exact.block_cum
    assert sampled.total_tokens == exact.total_tokens and sampled.distinct_blocks == exact.distinct_blocks


def test_sampling_keeps_about_its_share_of_the_blocks():
    workload = generated(2000, seed=2)
    exact = onepass.of_workload(workload, 512, keep_chains=False)
    sampled = onepass.of_workload(workload, 512, sample=0.1, seed=4)
    sampled.curve()
    share = sampled.distinct_blocks / exact.distinct_blocks
    assert 0.07 < share < 0.13, share


def test_a_workload_of_token_keys_streams_through_small_batches():
    rng = random.Random(3)
    requests = [[rng.randrange(50) for _ in range(rng.randint(0, 6))] for _ in range(300)]
    one = onepass.OnePass(1, batch_blocks=64)
    for keys in requests:
        one.add([f"k{k}" for k in keys], len(keys) + 1)
    curve = one.curve()
    for capacity in (1, 3, 20, 200):
        assert curve.hits(capacity) == simulate_lru(requests, capacity).hit_blocks
