"""The prefix cache inside the engine: hits are exact, misses are explained, tenants are isolated."""

import pytest

from engine.engine import Engine, EngineConfig, SamplingParams
from tests.helpers.reference import greedy_generate, no_cache_logits
from tests.helpers.tiny_models import random_prompts, tiny_model

BS = 4


@pytest.fixture(scope="module")
def model():
    return tiny_model("qwen2-gqa")


def make_engine(model, **kw):
    engine = Engine.from_model(model, config=EngineConfig(block_size=BS, **{"num_blocks": 64, **kw}))
    events = []
    engine.trace.listeners.append(events.append)
    return engine, events


def of_type(events, kind, request_id=None):
    return [
        e for e in events if e["type"] == kind and (request_id is None or e.get("request_id") == request_id)
    ]


def test_prefix_hit_skips_prefill_and_stays_exact(model):
    engine, events = make_engine(model)
    system = random_prompts([21], seed=11)[0]
    first, second = system + [5, 6, 7], system + [8, 9, 10, 11, 12]
    engine.generate([first], SamplingParams(max_tokens=4))
    out = engine.generate([second], SamplingParams(max_tokens=6, return_logits=True))[0]
    # 5 whole blocks + the first token of the 6th: every shared token
    assert out.cached_tokens == 21
    chunks = of_type(events, "prefill_chunk", out.request_id)
    # prefill started after the hit
    assert chunks[0]["start"] == 21
    ref = no_cache_logits(model, second + out.token_ids)
    assert (out.logits - ref[len(second) - 1 : -1]).abs().max().item() <= 1e-4
    assert out.token_ids == greedy_generate(model, second, 6)
    match = of_type(events, "prefix_match", out.request_id)[0]
    assert match["matched_tokens"] == 21 and match["reason"] == "divergent"
    assert match["detail"]["reused_partial"] == 1
    # first token that differs, with both tokens named
    assert match["detail"]["position"] == 21
    assert match["detail"]["expected_id"] == 5 and match["detail"]["actual_id"] == 8


def test_identical_prompt_always_computes_its_last_token(model):
    engine, events = make_engine(model)
    prompt = random_prompts([16], seed=12)[0]
    a = engine.generate([prompt], SamplingParams(max_tokens=3))[0]
    b = engine.generate([prompt], SamplingParams(max_tokens=3))[0]
    # 3 whole blocks, and the first 3 tokens of the 4th (a tree block, copied before the last token is written)
    assert b.cached_tokens == 15 and b.token_ids == a.token_ids
    match = of_type(events, "prefix_match", b.request_id)[0]
    assert match["reason"] == "full_match" and match["detail"]["reused_partial"] == 3
    # the cached block itself never changes
    assert len(of_type(events, "block_copied", b.request_id)) == 1


def test_a_token_equal_again_after_the_first_difference_is_not_a_hit(model):
    engine, events = make_engine(model)
    prompt = random_prompts([17], seed=13)[0]
    engine.generate([prompt], SamplingParams(max_tokens=2))
    # only position 0 differs
    changed = [prompt[0] + 1] + prompt[1:]
    out = engine.generate([changed], SamplingParams(max_tokens=2))[0]
    assert out.cached_tokens == 0
    match = of_type(events, "prefix_match", out.request_id)[0]
    assert match["reason"] == "divergent" and match["detail"]["position"] == 0


def test_cache_salts_never_share_blocks(model):
    engine, events = make_engine(model)
    prompt = random_prompts([13], seed=14)[0]
    # no salt
    engine.generate([prompt], SamplingParams(max_tokens=2))
    rid = engine.submit(prompt, SamplingParams(max_tokens=2), cache_salt="tenant-b")
    while engine.has_unfinished():
        engine.step()
    assert engine.output(rid).cached_tokens == 0
    assert not of_type(events, "block_shared", rid)
    assert of_type(events, "prefix_match", rid)[0]["reason"] == "salt"
    again = engine.submit(prompt, SamplingParams(max_tokens=2), cache_salt="tenant-b")
    while engine.has_unfinished():
        engine.step()
    # same tenant shares
    assert engine.output(again).cached_tokens == 12


def test_short_prompts_and_a_disabled_cache_are_explained(model):
    engine, events = make_engine(model)
    out = engine.generate([[5, 6, 7]], SamplingParams(max_tokens=2))[0]
    assert of_type(events, "prefix_match", out.request_id)[0]["reason"] == "short_prompt"
    off, off_events = make_engine(model, prefix_cache=False)
    prompt = random_prompts([12], seed=15)[0]
    off.generate([prompt, prompt], SamplingParams(max_tokens=2))
    assert {e["reason"] for e in of_type(off_events, "prefix_match")} == {"disabled"}
    assert not of_type(off_events, "block_shared") and not of_type(off_events, "block_cached")


def test_evicted_prefix_is_named_with_its_policy(model):
    engine, events = make_engine(model, num_blocks=12)
    first = random_prompts([17], seed=16)[0]
    engine.generate([first], SamplingParams(max_tokens=2))
    # needs the cached blocks
    engine.generate(random_prompts([30], seed=17), SamplingParams(max_tokens=10))
    assert of_type(events, "block_evicted")
    out = engine.generate([first], SamplingParams(max_tokens=2))[0]
    match = of_type(events, "prefix_match", out.request_id)[0]
    assert match["reason"] == "evicted" and match["detail"]["policy"] == "lru"


def test_multi_turn_reuses_the_whole_conversation(model):
    engine, events = make_engine(model)
    turn1 = random_prompts([14], seed=18)[0]
    rid = engine.submit(turn1, SamplingParams(max_tokens=6))
    while engine.has_unfinished():
        engine.step()
    history = engine.output(rid)
    # 20 tokens, 19 computed
    sequence = history.prompt_token_ids + history.token_ids
    # the next user turn, appended
    engine.edit(rid, len(sequence), [9, 10, 11], "insert")
    while engine.has_unfinished():
        engine.step()
    match = of_type(events, "prefix_match", rid)[-1]
    # every computed token of the first turn: 4 blocks and the cached tail
    assert match["matched_tokens"] == 19
    out = engine.output(rid)
    new = out.token_ids[len(history.token_ids) + 3 :]
    assert new == greedy_generate(model, sequence + [9, 10, 11], len(new))


def test_parallel_samples_share_the_prompt(model):
    engine, events = make_engine(model)
    prompt = random_prompts([10], seed=19)[0]
    rid = engine.submit(prompt, SamplingParams(max_tokens=5, n=3, temperature=0.8, seed=1))
    while engine.has_unfinished():
        engine.step()
    children = [e["request_id"] for e in of_type(events, "request_arrived") if e["parent_id"] == rid]
    assert len(children) == 2
    assert {e["physical"] for e in of_type(events, "block_shared", children[0])} >= set(
        e["physical"] for e in of_type(events, "block_allocated", rid)[:2]
    )
    samples = [engine.output(r).token_ids for r in [rid, *children]]
    assert all(len(tokens) == 5 for tokens in samples)
    # seeded samples differ from each other (seed + k for child k)
    assert len({tuple(t) for t in samples}) > 1


def test_hit_rates_are_emitted_cumulative_and_windowed(model):
    engine, events = make_engine(model, hit_rate_window=2)
    system = random_prompts([12], seed=20)[0]
    engine.generate([system + [1]], SamplingParams(max_tokens=1))
    engine.generate([system + [2]], SamplingParams(max_tokens=1))
    engine.generate([[3, 4, 5, 6, 7, 8, 9]], SamplingParams(max_tokens=1))
    last = of_type(events, "hit_rates")[-1]
    assert last["request_hit_rate"] == pytest.approx(1 / 3)
    assert last["token_hit_rate"] == pytest.approx(12 / (12 + 12 + 6))
    assert last["window"]["n"] == 2 and last["window"]["request_hit_rate"] == pytest.approx(1 / 2)


@pytest.mark.parametrize("policy", ["lru", "lfu", "cost"])
def test_memory_pressure_running_requests_finish_exactly(model, policy):
    engine, events = make_engine(model, num_blocks=16, eviction=policy, max_batched_tokens=16)
    prompts = random_prompts([13, 9, 15, 11, 14, 10], seed=21)
    outs = engine.generate(prompts, SamplingParams(max_tokens=8))
    assert [o.token_ids for o in outs] == [greedy_generate(model, p, 8) for p in prompts]
    evictions = of_type(events, "block_evicted")
    assert evictions and {e["policy"] for e in evictions} == {policy}


def test_lru_evicts_the_least_recently_used_prefix_first(model):
    engine, events = make_engine(model, num_blocks=14)
    old, recent = random_prompts([9, 9], seed=22)
    engine.generate([old], SamplingParams(max_tokens=1))
    engine.generate([recent], SamplingParams(max_tokens=1))
    whole = [e for e in of_type(events, "block_cached") if not e["hash"].startswith("tail:")]
    old_blocks = {e["physical"] for e in whole[:2]}
    # 12 blocks: 8 free + 4 evicted
    engine.generate(random_prompts([45], seed=23), SamplingParams(max_tokens=1))
    evicted = [e for e in of_type(events, "block_evicted")]
    # partial tails go first
    assert [e["hash"].startswith("tail:") for e in evicted[:2]] == [True, True]
    # then the least recently used whole blocks
    assert {e["physical"] for e in evicted[2:4]} == old_blocks
