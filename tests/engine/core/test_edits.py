"""Edits keep the K/V of [0, m) and recompute from m; the answer equals a cold run on the edited sequence."""

import pytest

from engine.core.edits import EditError, apply_edit
from engine.engine import Engine, EngineConfig, SamplingParams
from tests.helpers.reference import greedy_generate, no_cache_logits
from tests.helpers.tiny_models import random_prompts, tiny_model

BS = 4
# blocks: [0-3] [4-7] [8-11] [12-15] [16-17]
PROMPT_LEN = 18


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama-gqa")


def make_engine(model, **kw):
    return Engine.from_model(model, config=EngineConfig(block_size=BS, num_blocks=64, **kw))


def run_to_end(engine, rid):
    while engine.requests[rid].finish_reason is None:
        engine.step()
    return engine.output(rid)


def assert_matches_cold_run(model, out, new_tokens):
    """Generated-after-edit tokens and logits equal the no-cache forward on the edited sequence."""
    sequence = out.prompt_token_ids + out.token_ids
    context = len(sequence) - len(new_tokens)
    ref = no_cache_logits(model, sequence)
    diff = (out.logits - ref[context - 1 : context - 1 + len(new_tokens)]).abs().max().item()
    assert diff <= 1e-4, diff
    assert new_tokens == greedy_generate(model, sequence[:context], len(new_tokens))


@pytest.mark.parametrize(
    "position,kind",
    [
        (0, "replace"),
        (6, "replace"),
        (8, "replace"),
        (PROMPT_LEN - 1, "replace"),
        (5, "insert"),
        (12, "insert"),
        (9, "delete"),
        (0, "delete"),
    ],
)
def test_edit_in_the_prompt_of_a_finished_request(model, position, kind):
    engine = make_engine(model)
    prompt = random_prompts([PROMPT_LEN])[0]
    rid = engine.submit(prompt, SamplingParams(max_tokens=5, return_logits=True))
    run_to_end(engine, rid)
    event = engine.edit(rid, position, [7, 11] if kind != "delete" else 2, kind)
    assert event["type"] == "invalidate" and event["recompute_tokens"] > 0
    out = run_to_end(engine, rid)
    # generated part was discarded, generation restarted after the new prompt
    assert len(out.token_ids) == 5
    assert_matches_cold_run(model, out, out.token_ids)


@pytest.mark.parametrize("position", [6, 8, 13, PROMPT_LEN - 1])
def test_edit_in_the_prompt_of_a_running_request_keeps_blocks_before_m(model, position):
    engine = make_engine(model)
    rid = engine.submit(random_prompts([PROMPT_LEN])[0], SamplingParams(max_tokens=8, return_logits=True))
    for _ in range(4):
        engine.step()
    table = list(engine.requests[rid].block_table)
    event = engine.edit(rid, position, [5], "replace")
    assert event["first_recomputed"] == position
    block = position // BS
    # whole blocks before m's block
    assert event["kept"] == table[:block]
    # m's block is full and in the prefix tree: its valid part is copied, not written over
    if position % BS:
        assert [c[0] for c in event["copied"]] == [table[block]]
        assert event["dropped"] == table[block + 1 :]
    else:
        assert event["copied"] == [] and event["dropped"] == table[block:]
    assert event["recompute_tokens"] == PROMPT_LEN - position
    out = run_to_end(engine, rid)
    assert_matches_cold_run(model, out, out.token_ids)


def test_edit_in_the_generated_part_continues_from_the_edit(model):
    engine = make_engine(model)
    prompt = random_prompts([10])[0]
    rid = engine.submit(prompt, SamplingParams(max_tokens=6, return_logits=True))
    for _ in range(5):
        engine.step()
    generated = list(engine.requests[rid].output_token_ids)
    m = len(prompt) + 2
    engine.edit(rid, m, [42], "replace")
    out = run_to_end(engine, rid)
    assert out.token_ids[:3] == generated[:2] + [42]
    new = out.token_ids[3:]
    # max_tokens counts the tokens generated after the edit
    assert len(new) == 6
    assert_matches_cold_run(model, out, new)


def test_edit_on_a_shared_block_leaves_the_other_request_unchanged(model):
    engine = make_engine(model)
    prompt = random_prompts([14], seed=5)[0]
    cold = make_engine(model).generate([prompt], SamplingParams(max_tokens=8))[0].token_ids
    parent = engine.submit(prompt, SamplingParams(max_tokens=8, return_logits=True))
    for _ in range(3):
        engine.step()
    (child,) = engine.fork(parent, 1)
    shared = engine.requests[parent].block_table[1]
    # inside logical block 1, shared with the parent
    event = engine.edit(child, 6, [9], "replace")
    assert [shared, event["copied"][0][1]] == event["copied"][0]
    assert engine.cache.pool.ref_counts[shared] == 1
    while engine.has_unfinished():
        engine.step()
    assert engine.output(parent).token_ids == cold
    child_out = engine.output(child)
    assert_matches_cold_run(model, child_out, child_out.token_ids)


def test_out_of_range_edits_are_messages_not_crashes(model):
    engine = make_engine(model)
    rid = engine.submit(random_prompts([6])[0], SamplingParams(max_tokens=2))
    with pytest.raises(EditError, match="positions 0-5"):
        engine.edit(rid, 6, [1], "replace")
    with pytest.raises(EditError, match="valid positions are 0-6"):
        engine.edit(rid, 9, [1], "insert")
    with pytest.raises(EditError, match="unknown edit kind"):
        engine.edit(rid, 0, [1], "swap")
    with pytest.raises(ValueError, match="no request"):
        engine.edit("nope", 0, [1])
    # nothing lost
    assert engine.requests[rid].prompt_token_ids


def test_apply_edit_regions():
    p, g = [1, 2, 3, 4], [5, 6]
    assert apply_edit(p, g, 1, [9], "replace").tokens == [1, 9, 3, 4]
    assert apply_edit(p, g, 5, [9], "replace").tokens == [1, 2, 3, 4, 5, 9]
    # a new turn appended
    assert apply_edit(p, g, 6, [7, 8], "insert").tokens == [1, 2, 3, 4, 5, 6, 7, 8]
    assert apply_edit(p, g, 4, 1, "delete").tokens == [1, 2, 3, 4]
    assert apply_edit(p, g, 0, [0], "insert").prompt == [0, 1, 2, 3, 4]
    # edits in the prompt that run past its end: nothing before m is lost, everything typed is kept
    assert apply_edit(p, g, 2, 3, "delete").tokens == [1, 2]
    assert apply_edit(p, g, 3, [7, 8, 9], "replace").tokens == [1, 2, 3, 7, 8, 9]


def test_fork_shares_blocks_and_copies_on_write(model):
    engine = make_engine(model)
    prompt = random_prompts([10], seed=4)[0]
    parent = engine.submit(prompt, SamplingParams(max_tokens=6))
    engine.step()
    children = engine.fork(parent, 2)
    table = engine.requests[parent].block_table
    assert all(engine.cache.pool.ref_counts[b] == 3 for b in table)
    events = []
    engine.trace.listeners.append(events.append)
    while engine.has_unfinished():
        engine.step()
    copies = [e for e in events if e["type"] == "block_copied"]
    # the partial block (positions 8-10) is copied by two of the three writers
    assert len(copies) == 2
    outs = [engine.output(r).token_ids for r in [parent, *children]]
    assert outs[0] == outs[1] == outs[2] == greedy_generate(model, prompt, 6)
    # free or cached
    assert not any(engine.cache.pool.ref_counts) and engine.cache.num_available() == 64


def test_edit_with_a_full_pool_is_exact_and_loses_nothing(model):
    """The pool is full and m's block is in the prefix tree: the copy takes a block released by the edit."""
    engine = Engine.from_model(model, config=EngineConfig(block_size=BS, num_blocks=4))
    rid = engine.submit(random_prompts([11])[0], SamplingParams(max_tokens=5, return_logits=True))
    for _ in range(4):
        engine.step()
    assert engine.cache.num_available() == 0
    event = engine.edit(rid, 6, [40], "replace")
    assert event["first_recomputed"] == 6 and len(event["copied"]) == 1
    out = run_to_end(engine, rid)
    assert_matches_cold_run(model, out, out.token_ids)


def test_an_edit_that_expects_another_token_is_refused_and_changes_nothing():
    engine = Engine.from_model(tiny_model("llama-gqa"), config=EngineConfig(block_size=4, num_blocks=32))
    rid = engine.submit(list(range(5, 15)), SamplingParams(max_tokens=2))
    engine.step()
    with pytest.raises(EditError, match="expected"):
        engine.edit(rid, 3, [40], expected_token=99)
    assert engine.requests[rid].prompt_token_ids == list(range(5, 15))
    event = engine.edit(rid, 3, [40], expected_token=8)
    assert event["first_recomputed"] == 3 and engine.requests[rid].prompt_token_ids[3] == 40


def test_a_selection_becomes_text_of_another_length_in_one_edit(model):
    """replace with num_replaced: one token becomes three (and three become one) in a single edit event."""
    from tests.helpers.oracle import Witness, differences

    engine = make_engine(model)
    witness = Witness(engine)
    rid = engine.submit(random_prompts([PROMPT_LEN])[0], SamplingParams(max_tokens=5, return_logits=True))
    for _ in range(3):
        engine.step()
    before = list(engine.requests[rid].prompt_token_ids)
    engine.edit(rid, 6, [7, 8, 9], "replace", num_replaced=1)
    assert engine.requests[rid].prompt_token_ids == before[:6] + [7, 8, 9] + before[7:]
    engine.edit(rid, 6, [5], "replace", num_replaced=3)
    assert engine.requests[rid].prompt_token_ids == before[:6] + [5] + before[7:]
    assert differences(engine, witness.state()) == []
    out = run_to_end(engine, rid)
    assert_matches_cold_run(model, out, out.token_ids)
    with pytest.raises(EditError):
        engine.edit(rid, len(engine.requests[rid].tokens) - 1, [1], "replace", num_replaced=2)
