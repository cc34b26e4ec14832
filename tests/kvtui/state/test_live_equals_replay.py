"""A real engine run reduced live equals the replay of the trace it wrote, and both agree with the engine."""

import pytest

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.trace import read_trace
from kvtui.state import CacheState, replay, state_fingerprint
from tests.helpers.tiny_models import random_prompts, tiny_model


@pytest.mark.parametrize("arch,extra", [("llama-gqa", {}), ("mistral-mqa", {"sliding_window": 3})])
def test_live_state_equals_replayed_state(tmp_path, arch, extra):
    engine = Engine.from_model(
        tiny_model(arch, **extra), config=EngineConfig(block_size=4, num_blocks=20, max_batched_tokens=8)
    )
    path = tmp_path / "trace.jsonl"
    engine.add_trace_file(path)
    live = CacheState(engine.trace.header)
    engine.trace.listeners.append(live.apply)
    prompts = random_prompts([13, 9, 17], seed=4)
    ids = [engine.submit(p, SamplingParams(max_tokens=6)) for p in prompts[:2]]
    engine.step()
    engine.step()
    # shared blocks, copy-on-write
    engine.fork(ids[0], 2)
    engine.step()
    # a running request
    engine.edit(ids[1], 5, [7], "replace")
    # a prefix hit
    engine.submit(prompts[0][:9] + prompts[2], SamplingParams(max_tokens=5))
    while engine.has_unfinished():
        engine.step()
    # a finished request
    engine.edit(ids[0], 11, [3, 4], "insert")
    while engine.has_unfinished():
        engine.step()
    engine.close()

    trace = read_trace(path, strict=True)
    replayed = replay(trace.header, trace.events)
    live_print, replay_print = state_fingerprint(live), state_fingerprint(replayed)
    assert [k for k in live_print if live_print[k] != replay_print[k]] == []
    assert replayed.ref == engine.cache.pool.ref_counts
    assert replayed.n_free == engine.cache.pool.num_free() and replayed.n_cached == engine.cache.num_cached()
    assert all(replayed.requests[r].token_ids == engine.requests[r].tokens for r in engine.requests)
