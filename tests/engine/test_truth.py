"""Each divergence between the view and the engine that a review found, held fixed: the events say what happened.

The differential oracle (tests/helpers/oracle.py) checks all of it after every rule of the stateful test; these pin the
reported cases one by one, so a regression names itself.
"""

import pytest

from engine.core.request import Status
from engine.engine import Engine, EngineConfig, SamplingParams
from tests.helpers.oracle import Witness, differences
from tests.helpers.tiny_models import random_prompts, tiny_model


def make(arch="llama-gqa", **config):
    extra = {"sliding_window": 3} if arch == "mistral-mqa" else {}
    engine = Engine.from_model(tiny_model(arch, **extra), config=EngineConfig(**{"block_size": 4, **config}))
    events: list[dict] = []
    engine.trace.listeners.append(events.append)
    return engine, events, Witness(engine)


def of(events, kind):
    return [e for e in events if e["type"] == kind]


def test_a_fork_holds_its_own_lock_on_the_path_and_the_view_counts_it():
    engine, events, witness = make(num_blocks=32)
    rid = engine.submit(random_prompts([13])[0], SamplingParams(max_tokens=4))
    for _ in range(2):
        engine.step()
    engine.fork(rid, 1)
    node = engine.requests[rid].lock_node
    assert node.lock_ref == 2
    state = witness.state()
    assert len(state.nodes[node.node_id].lockers) == 2 and differences(engine, state) == []
    # the child's own lock event
    assert [e["request_id"] for e in of(events, "radix_lock")][-1] != rid


def test_an_edit_releases_the_locks_it_no_longer_needs():
    engine, events, witness = make(num_blocks=32)
    rid = engine.submit(random_prompts([13])[0], SamplingParams(max_tokens=4))
    for _ in range(3):
        engine.step()
    # inside block 0: no whole block stays
    engine.edit(rid, 2, [9], "replace")
    state = witness.state()
    assert all(not n.lockers for i, n in state.nodes.items() if i) and differences(engine, state) == []


def test_editing_a_waiting_request_keeps_it_waiting_in_the_view():
    engine, events, witness = make(num_blocks=32, max_num_seqs=1)
    first = engine.submit(random_prompts([9])[0], SamplingParams(max_tokens=3))
    second = engine.submit(random_prompts([9], seed=1)[0], SamplingParams(max_tokens=3))
    engine.step()
    assert engine.requests[second].status is Status.WAITING
    event = engine.edit(second, 2, [5], "replace")
    assert event["status"] == "waiting" and witness.state().requests[second].status == "waiting"
    assert differences(engine, witness.state()) == []
    while engine.has_unfinished():
        engine.step()
    assert engine.output(first).finish_reason == engine.output(second).finish_reason == "length"


def test_a_one_token_prefill_after_a_full_match_counts_as_a_prefill():
    engine, events, _ = make(num_blocks=32)
    prompt = random_prompts([9])[0]
    engine.generate([prompt], SamplingParams(max_tokens=2))
    # 8 of 9 tokens cached: a 1-token prefill
    engine.submit(prompt, SamplingParams(max_tokens=2))
    engine.step()
    assert of(events, "prefill_chunk")[-1]["end"] - of(events, "prefill_chunk")[-1]["start"] == 1
    step = of(events, "step")[-1]
    assert (step["num_prefill"], step["num_decode"]) == (1, 0)


def test_cached_tokens_count_what_the_cache_served_at_the_first_admission():
    # 3 prompts in 10 blocks: preemptions; a readmitted request re-matches its own blocks, which do not count
    engine, events, witness = make(num_blocks=10, max_batched_tokens=64)
    outs = engine.generate(random_prompts([12, 10, 14], seed=1), SamplingParams(max_tokens=12))
    assert of(events, "request_preempted")
    # different prompts: nothing shared
    assert [o.cached_tokens for o in outs] == [0, 0, 0]
    assert all(e["cached_tokens"] <= e["num_prompt_tokens"] for e in of(events, "request_finished"))
    assert differences(engine, witness.state()) == []


def test_a_step_that_preempts_admits_nobody_and_refunds_the_victims_tokens():
    engine, events, _ = make(num_blocks=10, max_batched_tokens=64)
    engine.generate(random_prompts([12, 10, 14], seed=1), SamplingParams(max_tokens=12))
    preempted_steps = set()
    step = 0
    for e in events:
        if e["type"] == "step":
            step = e["step"] + 1
        elif e["type"] == "request_preempted":
            preempted_steps.add(step)
    admitted_steps, step = set(), 0
    for e in events:
        if e["type"] == "step":
            step = e["step"] + 1
        elif e["type"] == "request_scheduled":
            admitted_steps.add(step)
    assert preempted_steps and not preempted_steps & admitted_steps
    # 11 before the rule, in the same 24 steps
    assert len(of(events, "request_preempted")) <= 7


def test_the_invalidate_of_a_finished_request_says_where_it_actually_resumes():
    engine, events, witness = make("mistral-mqa", num_blocks=64)
    prompt = random_prompts([30], seed=3)[0]
    rid = engine.submit(prompt, SamplingParams(max_tokens=4))
    while engine.has_unfinished():
        engine.step()
    event = engine.edit(rid, 14, [5], "replace")
    assert event["status"] == "waiting"
    engine.step()
    chunk = [e for e in of(events, "prefill_chunk") if e["request_id"] == rid][-1]
    assert chunk["start"] == event["first_recomputed"] == engine.requests[rid].num_cached
    assert event["first_recomputed"] == of(events, "ring_resume")[-1]["position"] <= 14
    assert differences(engine, witness.state()) == []


@pytest.mark.parametrize("arch", ["llama-gqa", "mistral-mqa"])
def test_aborts_of_waiting_and_running_requests_leave_the_view_true(arch):
    engine, events, witness = make(arch, num_blocks=16, max_num_seqs=1, window=6, sink_tokens=1)
    running = engine.submit(random_prompts([9])[0], SamplingParams(max_tokens=5))
    waiting = engine.submit(random_prompts([9], seed=2)[0], SamplingParams(max_tokens=5))
    engine.step()
    # never ran: no sink_divergence to compute, and no crash
    engine.abort(waiting)
    engine.step()
    engine.abort(running)
    assert {engine.output(r).finish_reason for r in (running, waiting)} == {"aborted"}
    assert differences(engine, witness.state()) == []


def test_an_edit_of_a_finished_request_copies_the_reused_partial_block_at_the_edit_and_says_so():
    engine, events, witness = make(num_blocks=32)
    rid = engine.submit(random_prompts([10])[0], SamplingParams(max_tokens=1))
    while engine.has_unfinished():
        engine.step()
    # position 9 lies in block 2, cached as a tail: its first token stays, so the block is reused and copied
    start = len(events)
    invalidate = engine.edit(rid, 9, [5], "replace")
    mine = events[start:]
    copies = [[e["src"], e["dst"]] for e in of(mine, "block_copied")]
    assert invalidate["copied"] == copies and len(copies) == 1
    assert mine.index(of(mine, "block_copied")[0]) < mine.index(invalidate)
    assert engine.requests[rid].block_table[2] == copies[0][1]
    assert differences(engine, witness.state()) == []
    while engine.has_unfinished():
        engine.step()
    # nothing copied later
    assert of(events[start:], "block_copied") == of(mine, "block_copied")
    assert differences(engine, witness.state()) == []


def finished_by_stop(engine, prompt):
    """A request that stops at a stop token it emits (a tiny random model rarely reaches its EOS)."""
    probe = Engine.from_model(engine.model, config=EngineConfig(block_size=4, num_blocks=32))
    third = probe.generate([prompt], SamplingParams(max_tokens=3))[0].token_ids[-1]
    rid = engine.submit(prompt, SamplingParams(max_tokens=8, stop_token_ids=[third]))
    while engine.has_unfinished():
        engine.step()
    assert engine.requests[rid].finish_reason == "stop"
    return rid


def test_a_fork_of_a_request_that_ended_at_a_stop_token_is_refused():
    engine, events, witness = make(num_blocks=32)
    rid = finished_by_stop(engine, random_prompts([9])[0])
    with pytest.raises(ValueError, match="past its end"):
        engine.fork(rid, 1)
    assert not engine.has_unfinished() and differences(engine, witness.state()) == []


def test_a_fork_of_a_finished_request_is_a_new_run_timed_from_the_fork(monkeypatch):
    engine, events, witness = make(num_blocks=32)
    rid = engine.submit(random_prompts([9])[0], SamplingParams(max_tokens=3))
    while engine.has_unfinished():
        engine.step()
    # an idle minute between the finish and the fork
    clock = engine.trace._clock
    monkeypatch.setattr(engine.trace, "_clock", lambda: clock() + 60.0)
    children = engine.fork(rid, 2)
    # numbered per parent, no gaps
    assert children == [f"{rid}.1", f"{rid}.2"]
    while engine.has_unfinished():
        engine.step()
    for child in children:
        out = engine.output(child)
        assert len(out.token_ids) == 3 + 3 and engine.requests[child].finish_reason == "length"
        assert out.tpot is not None and out.tpot < 30.0 and out.ttft < 30.0
    finished = {e["request_id"]: e for e in of(events, "request_finished")}
    assert all(finished[c]["tpot"] < 30.0 for c in children)
    assert differences(engine, witness.state()) == []
