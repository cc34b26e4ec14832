"""The one-pass LRU curve, and its split over device, host and disk tiers, equals a full simulation through the
real scheduler and KVCacheManager wherever the one-pass model's assumptions hold: requests one at a time (each finishes before the next arrives), no chunking
(the batch budget holds the longest prompt), no preemption (every capacity holds the longest request), LRU, and
no partial-block reuse (prompts of whole blocks whose last block is their own). Where the engine's locks,
chunking or preemption break them, `kvtui whatif --method both` shows both figures and what differed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvtui.whatif import onepass
from kvtui.whatif.cost import CostModel
from kvtui.whatif.report import compare_lines
from kvtui.whatif.requests import SimRequest, Workload
from kvtui.whatif.simulate import SimConfig, simulate
from kvtui.whatif.tiers import tier_split

B = 4


@st.composite
def hash_id_workloads(draw, max_requests=12):
    """Requests of hash ids: a prefix of an earlier request (a shared head, or a whole repeat) and new ids,
    then one id of its own (so no request's last block is ever matched, partly or whole)."""
    prompts: list[list[int]] = []
    fresh = 1000
    for _ in range(draw(st.integers(1, max_requests))):
        head: list[int] = []
        if prompts and draw(st.booleans()):
            base = draw(st.sampled_from(prompts))
            head = base[: draw(st.integers(0, len(base) - 1))]
        body = draw(st.lists(st.integers(0, 6), max_size=4))
        fresh += 1
        prompts.append(head + body + [fresh])
    return prompts


def as_workload(prompts: list[list[int]]) -> Workload:
    requests = [
        SimRequest(
            f"r{i}", 1000.0 * i, None, None, 1, hash_ids=ids, input_length=len(ids) * B, trace_block_size=B
        )
        for i, ids in enumerate(prompts)
    ]
    return Workload("hypothesis", "mooncake", requests)


@settings(max_examples=60, deadline=None)
@given(hash_id_workloads())
def test_one_pass_equals_the_full_simulation_where_its_assumptions_hold(prompts):
    workload = as_workload(prompts)
    longest = max(len(p) for p in prompts)
    distinct = len({tuple(p[: i + 1]) for p in prompts for i in range(len(p))})
    # five or more capacities, each holding the longest request (+1 block for its output token's slot)
    capacities = sorted({(longest + 1 + k * max(1, (distinct - longest) // 4)) * B for k in range(6)})
    capacities = sorted(set(capacities) | {(distinct + 2) * B})
    assert len(capacities) >= 5 or distinct - longest < 4
    one_pass = onepass.lru_points(workload, B, capacities)
    longest_tokens = longest * B
    for capacity, expected in zip(capacities, one_pass):
        config = SimConfig(capacity, B, "lru", max_batched_tokens=longest_tokens, max_num_seqs=1)
        result = simulate(workload.requests, config, hash_ids=True)
        assert result.preemptions == 0 and result.partial_tokens == 0
        assert result.hit_tokens == expected, (capacity, result.causes)


def test_where_the_engine_breaks_them_both_figures_are_reported_with_the_reasons():
    # four requests share a 6-block head and arrive together, admitted in one step: the later ones find the head
    # announced but not yet computed (in flight), which one request at a time never sees
    prompts = [[1, 2, 3, 4, 5, 6, 100 + i] for i in range(4)]
    requests = [
        SimRequest(f"r{i}", 0.0, None, None, 1, hash_ids=ids, input_length=len(ids) * B, trace_block_size=B)
        for i, ids in enumerate(prompts)
    ]
    workload = Workload("together", "mooncake", requests)
    capacity = 64 * B
    result = simulate(requests, SimConfig(capacity, B, "lru"), hash_ids=True)
    [expected] = onepass.lru_points(workload, B, [capacity])
    assert result.hit_tokens < expected and result.causes["in_flight"] > 0
    prompt = workload.prompt_tokens
    report = {
        "prompt_tokens": prompt,
        "format": "mooncake",
        "points": [
            {
                "capacity_tokens": capacity,
                "block_size": B,
                "eviction": "lru",
                "method": "simulated",
                "token_hit_rate": result.hit_tokens / prompt,
                "misses": dict(result.causes),
                "preemptions": result.preemptions,
                "reused_partial_tokens": result.partial_tokens,
            },
            {
                "capacity_tokens": capacity,
                "block_size": B,
                "eviction": "lru",
                "method": "one-pass",
                "token_hit_rate": expected / prompt,
                "misses": {},
            },
        ],
    }
    text = "\n".join(compare_lines(report))
    assert "in flight" in text and f"{100 * (result.hit_tokens - expected) / prompt:+.1f}" in text


@settings(max_examples=60, deadline=None)
@given(hash_id_workloads(), st.data())
def test_the_tier_split_equals_the_full_simulation_with_host_and_disk(prompts, data):
    """The same conditions with a host tier (and a disk below it): each tier serves what the one-pass split
    says, so demotion, promotion and the tiers' LRU order are the exclusive hierarchy's."""
    workload = as_workload(prompts)
    longest = max(len(p) for p in prompts)
    distinct = len({tuple(p[: i + 1]) for p in prompts for i in range(len(p))})
    curve = onepass.lru_curve_of(workload, B)
    longest_tokens = longest * B
    for _ in range(4):
        device = data.draw(st.integers(longest + 1, max(longest + 1, distinct + 1)), label="device blocks")
        host = data.draw(st.integers(1, max(1, distinct)), label="host blocks")
        disk = data.draw(st.sampled_from([0, 1, 2, max(1, distinct // 2)]), label="disk blocks")
        config = SimConfig(
            device * B,
            B,
            "lru",
            max_batched_tokens=longest_tokens,
            max_num_seqs=1,
            host_capacity_tokens=host * B,
            disk_capacity_tokens=disk * B,
        )
        result = simulate(workload.requests, config, hash_ids=True)
        assert result.preemptions == 0 and result.partial_tokens == 0
        split = tier_split(curve, device, host, disk)
        got = result.tier_hits
        assert (got["device"], got["host"], got.get("disk", 0)) == (split.device, split.host, split.disk), (
            device,
            host,
            disk,
        )
        assert result.hit_tokens == split.total


def test_a_prefix_found_on_host_is_loaded_back_and_the_clock_charges_the_load():
    # r1 pushes r0's tail blocks out of a 5-block device onto the host (the stack is then 4 5 6 11 1 2 3 10):
    # r2 finds block 1 on the device and blocks 2 and 3 on the host
    prompts = [[1, 2, 3, 10], [4, 5, 6, 11], [1, 2, 3, 12]]
    requests = [
        SimRequest(f"r{i}", 0.0, None, None, 1, hash_ids=ids, input_length=len(ids) * B, trace_block_size=B)
        for i, ids in enumerate(prompts)
    ]
    workload = Workload("host", "mooncake", requests)
    split = tier_split(onepass.lru_curve_of(workload, B), 5, 4)
    assert (split.device, split.host, split.disk) == (B, 2 * B, 0)
    results = {}
    for per_host_token in (0.0, 1.0):
        cost = CostModel(per_host_token=per_host_token)
        config = SimConfig(5 * B, B, "lru", cost=cost, max_num_seqs=1, host_capacity_tokens=4 * B)
        results[per_host_token] = simulate(requests, config, hash_ids=True)
    result = results[1.0]
    assert result.tier_hits == {"device": B, "host": 2 * B}
    assert result.hit_tokens == 3 * B
    # the same steps, and a second for each token loaded from host
    assert result.steps == results[0.0].steps
    assert result.simulated_seconds - results[0.0].simulated_seconds == pytest.approx(2 * B)
    # without a host tier blocks 2 and 3 were dropped: computed again
    alone = simulate(requests, SimConfig(5 * B, B, "lru", max_num_seqs=1), hash_ids=True)
    assert alone.hit_tokens == B and alone.tier_hits is None
