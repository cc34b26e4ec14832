import pytest

from engine.engine import Engine, EngineConfig, SamplingParams
from tests.helpers.reference import greedy_generate
from tests.helpers.tiny_models import random_prompts, tiny_model


def recorded(engine):
    events = []
    engine.trace.listeners.append(events.append)
    return events


def test_requests_join_and_leave_at_step_boundaries():
    engine = Engine.from_model(tiny_model("llama-gqa"), config=EngineConfig(block_size=4, num_blocks=64))
    events = recorded(engine)
    a = engine.submit(random_prompts([5])[0], SamplingParams(max_tokens=6))
    engine.step()
    engine.step()
    b = engine.submit(random_prompts([7], seed=3)[0], SamplingParams(max_tokens=2))
    finished = []
    while engine.has_unfinished():
        finished += [o.request_id for o in engine.step()]
    # b joined a running batch and left before a
    assert finished == [b, a]
    steps_with_both = [e for e in events if e["type"] == "step" and e["num_prefill"] + e["num_decode"] == 2]
    assert steps_with_both, "b must have run in the same step as a's decodes"


def test_chunked_prefill_respects_the_token_budget():
    engine = Engine.from_model(
        tiny_model("llama-gqa"), config=EngineConfig(block_size=4, num_blocks=64, max_batched_tokens=8)
    )
    events = recorded(engine)
    engine.generate(random_prompts([19, 5]), SamplingParams(max_tokens=3))
    assert all(e["num_tokens"] <= 8 for e in events if e["type"] == "step")
    chunks = [
        (e["start"], e["end"]) for e in events if e["type"] == "prefill_chunk" and e["request_id"] == "r0"
    ]
    assert chunks[0] == (0, 8) and chunks[-1][1] == 19 and len(chunks) == 3


def test_too_long_for_the_pool_is_refused_with_a_reason():
    engine = Engine.from_model(tiny_model("llama-gqa"), config=EngineConfig(block_size=4, num_blocks=4))
    with pytest.raises(ValueError, match="exceeds the KV pool"):
        engine.submit(random_prompts([14])[0], SamplingParams(max_tokens=4))


def test_finished_requests_return_every_block():
    engine = Engine.from_model(tiny_model("llama-gqa"), config=EngineConfig(block_size=4, num_blocks=40))
    engine.generate(random_prompts([3, 9, 17]), SamplingParams(max_tokens=5))
    # free or cached
    assert engine.cache.num_available() == 40 and not any(engine.cache.pool.ref_counts)


def test_ttft_and_tpot_follow_their_definitions():
    engine = Engine.from_model(tiny_model("llama-gqa"))
    out = engine.generate(random_prompts([8]), SamplingParams(max_tokens=5))[0]
    req = engine.requests[out.request_id]
    assert out.ttft == req.first_token_time - req.arrival_time > 0
    assert out.tpot == (req.last_token_time - req.first_token_time) / 4
    single = engine.generate(random_prompts([8]), SamplingParams(max_tokens=1))[0]
    assert single.tpot is None


def test_abort_releases_a_running_or_waiting_request():
    engine = Engine.from_model(
        tiny_model("llama-gqa"), config=EngineConfig(block_size=4, num_blocks=40, max_num_seqs=1)
    )
    events = recorded(engine)
    running = engine.submit(random_prompts([9])[0], SamplingParams(max_tokens=20))
    waiting = engine.submit(random_prompts([5], seed=1)[0], SamplingParams(max_tokens=20))
    engine.step()
    assert engine.abort(running).finish_reason == "aborted"
    assert engine.abort(waiting).finish_reason == "aborted"
    assert not engine.has_unfinished() and not any(engine.cache.pool.ref_counts)
    assert [e["reason"] for e in events if e["type"] == "request_finished"] == ["aborted", "aborted"]


def test_a_waiting_edited_request_gives_its_blocks_back_when_nothing_else_fits():
    """An edit re-attaches a finished request's prefix while it waits; when the running request needs those
    blocks, the waiting one gives them back (a preemption) instead of the step finding nothing to place
    (found by the engine property test at 3000 examples)."""
    model = tiny_model("llama-gqa")
    # a budget of one token: the edited request stays waiting while the other runs
    config = EngineConfig(block_size=2, num_blocks=6, max_batched_tokens=1)
    engine = Engine.from_model(model, config=config)
    events = recorded(engine)
    edited = engine.submit([10, 11, 12, 13], SamplingParams(max_tokens=1))
    while engine.has_unfinished():
        engine.step()
    # 12 tokens: the whole pool
    running = engine.submit([20, 21, 22, 23, 24, 25, 26, 27], SamplingParams(max_tokens=4))
    engine.step()
    engine.edit(edited, 4, [3], "insert")
    assert engine.requests[edited].block_table == [0, 1]
    for _ in range(100):
        if not engine.has_unfinished():
            break
        engine.step()
    assert not engine.has_unfinished()
    preempted = [e["request_id"] for e in events if e["type"] == "request_preempted"]
    assert edited in preempted
    req = engine.requests[running]
    assert req.output_token_ids == greedy_generate(model, req.prompt_token_ids, 4)
