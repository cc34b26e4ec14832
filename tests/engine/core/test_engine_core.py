"""The engine core is the engine's bookkeeping: the same workload through `Engine` (a tiny model, greedy) and
through a bare `EngineCore` fed the engine's sampled tokens gives the identical event stream (wall-clock fields
aside), on random scenarios over full, window and alternating models, with pool pressure, forks, edits, aborts,
n > 1 samples and, in half of them, a host tier. KVTUI_CORE_SCENARIOS sets the number of scenarios."""

from __future__ import annotations

import os

import pytest

from engine.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.core.request import SamplingParams
from engine.models.shape import ModelShape
from engine.trace.writer import TraceSink
from tests.helpers.engine_scenarios import random_scenario, run_core, run_engine

SCENARIOS = int(os.environ.get("KVTUI_CORE_SCENARIOS", "60"))
SHAPE = ModelShape(
    "m", layers=1, q_heads=1, kv_heads=1, head_dim=1, dtype="float32", elem_bytes=4, windows=(None,)
)


@pytest.mark.parametrize("seed", range(SCENARIOS))
def test_core_fed_the_engines_tokens_emits_the_engines_events(seed):
    scenario = random_scenario(seed)
    engine_events, tokens, engine_errors, engine = run_engine(scenario)
    core_events, core_errors = run_core(scenario, tokens, engine)
    assert core_errors == engine_errors
    assert len(core_events) == len(engine_events)
    for index, (ours, theirs) in enumerate(zip(core_events, engine_events)):
        assert ours == theirs, f"scenario {seed}: event {index} differs"


def _core(**config) -> tuple[EngineCore, list[dict]]:
    sink = TraceSink()
    events: list[dict] = []
    sink.listeners.append(events.append)
    return EngineCore(SHAPE, EngineConfig(num_blocks=16, block_size=4, **config), sink), events


def _run(core: EngineCore, token: int = 7) -> None:
    while core.has_unfinished():
        scheduled = core.schedule()
        if scheduled is not None:
            core.update_from_output(scheduled, lambda index, req: token)


def test_a_stop_token_finishes_with_stop_and_eos_with_eos():
    core, events = _core()
    core.eos_ids = frozenset({9})
    core.add_request([1, 2, 3], SamplingParams(max_tokens=5, stop_token_ids=[7]))
    _run(core, token=7)
    core.add_request([1, 2, 3], SamplingParams(max_tokens=5))
    _run(core, token=9)
    reasons = [e["reason"] for e in events if e["type"] == "request_finished"]
    assert reasons == ["stop", "eos"]


def test_prompt_only_caching_keeps_generated_blocks_out_of_the_tree():
    for cache_generated, expected in ((True, 3), (False, 1)):
        sink = TraceSink()
        core = EngineCore(
            SHAPE, EngineConfig(num_blocks=16, block_size=4), sink, cache_generated=cache_generated
        )
        # 6 prompt tokens (one whole block) + 7 generated: 13 computed tokens fill three blocks
        core.add_request([1, 2, 3, 4, 5, 6], SamplingParams(max_tokens=8, ignore_eos=True))
        _run(core)
        assert sum(core.cache.prefix_cache.radix.holds(b) for b in range(16)) == expected


def test_step_events_off_emits_only_the_caches_events():
    sink = TraceSink()
    events: list[dict] = []
    sink.listeners.append(events.append)
    core = EngineCore(SHAPE, EngineConfig(num_blocks=16, block_size=4), sink, step_events=False)
    core.add_request([1, 2, 3, 4, 5], SamplingParams(max_tokens=3))
    _run(core)
    kinds = {e["type"] for e in events}
    assert "prefix_match" in kinds and "block_allocated" in kinds
    assert not kinds & {
        "request_arrived",
        "step",
        "decode",
        "prefill_chunk",
        "token_emitted",
        "request_finished",
    }


def test_a_finished_request_is_forgotten_when_asked():
    core, _ = _core()
    core.keep_finished = False
    rid = core.add_request([1, 2, 3], SamplingParams(max_tokens=2))
    _run(core)
    assert rid not in core.requests


def test_a_prompt_larger_than_the_pool_is_refused_before_it_queues():
    core, events = _core()
    with pytest.raises(ValueError, match="exceeds the KV pool"):
        core.add_request(list(range(60)), SamplingParams(max_tokens=8))
    assert not core.has_unfinished() and not events
