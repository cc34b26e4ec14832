"""Window layers paged as vLLM pages them (EngineConfig(window_layout="paged"): KV-cache groups sharing the pool,
blocks released as they leave the window, the hybrid hit rule; engine/core/group_blocks.py), exact against
transformers' no-cache forward (fp32) and its greedy `generate`, on the four window styles of the ring tests."""

import pytest
import torch

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.models.loading import stock_attention
from tests.engine.worker.test_ring import STYLES, assert_exact, window_model, window_of
from tests.helpers.decode_paths import DECODE_PATHS, paged_engine
from tests.helpers.tiny_models import random_prompts


def greedy_generate(model, style: str, prompt: list[int], max_new_tokens: int) -> list[int]:
    """transformers' own greedy `generate`, with the style's reference attention (Gemma 2: eager)."""
    ids = torch.tensor([prompt])
    with stock_attention(model, STYLES[style][2]):
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False
        )
    return out[0, len(prompt) :].tolist()


def paged(model, **config) -> Engine:
    return Engine.from_model(model, config=EngineConfig(window_layout="paged", **config))


@pytest.mark.parametrize("decode", DECODE_PATHS)
@pytest.mark.parametrize("style", sorted(STYLES))
def test_batched_chunked_generation_is_exact(style, decode):
    """Many requests at once, chunks of 7 crossing the window edge, sequences past 10 x W; decodes batched (by
    the C kernel or by torch, each group through its own tables)."""
    model = window_model(style)
    w = window_of(model)
    engine = paged_engine(
        model, decode, block_size=4, num_blocks=256, max_batched_tokens=7, window_layout="paged"
    )
    events = []
    engine.trace.listeners.append(events.append)
    prompts = random_prompts([1, 3, w, w + 1, 10 * w + 3, 2 * w - 1])
    outputs = engine.generate(prompts, SamplingParams(max_tokens=3 * w, return_logits=True))
    for out in outputs:
        assert_exact(model, style, out)
    # window groups gave blocks back while their requests ran (before request_finished)
    finished = min(i for i, e in enumerate(events) if e["type"] == "request_finished")
    window_groups = {g for g, group in enumerate(engine.cache.groups.groups) if group.window is not None}
    assert any(e["type"] == "block_released" and e["group"] in window_groups for e in events[:finished])
    # the header names the groups and what a block holds
    header = engine.trace.header
    assert header["kv_groups"] == [group.to_json() for group in engine.cache.groups.groups]
    assert header["bytes_per_block"] * engine.cache.pool.num_blocks == engine.kv.nbytes
    # every block event names its group; nothing is held once all finished
    assert all("group" in e for e in events if e["type"].startswith("block_"))
    assert not any(engine.cache.pool.ref_counts) and not engine.cache.groups.tables


@pytest.mark.parametrize("style", sorted(STYLES))
def test_greedy_tokens_equal_generate(style):
    model = window_model(style)
    w = window_of(model)
    engine = paged(model, block_size=4, num_blocks=128, max_batched_tokens=9)
    prompts = random_prompts([3 * w + 2, w - 1], seed=7)
    outputs = engine.generate(prompts, SamplingParams(max_tokens=2 * w))
    for prompt, out in zip(prompts, outputs):
        assert out.token_ids == greedy_generate(model, style, prompt, 2 * w)


@pytest.mark.parametrize("style", sorted(STYLES))
def test_prefix_hits_inside_and_past_the_window_are_exact(style):
    """A shared prefix shorter than the window and one many windows long: the long hit serves past the window
    (every group holds the blocks it needs), and both answers are the model's."""
    model = window_model(style)
    w = window_of(model)
    # every window block stays cached, so that hits anywhere in the prompt are there to take
    engine = paged(model, block_size=4, num_blocks=256, retention_interval=None)
    shared = random_prompts([10 * w + 3], seed=5)[0]
    first = engine.generate([shared], SamplingParams(max_tokens=4, return_logits=True))[0]
    assert_exact(model, style, first)
    short, long = shared[:4] + [9, 9, 9], shared[: 8 * w] + [9, 9, 9]
    hits = engine.generate([short, long], SamplingParams(max_tokens=w, return_logits=True))
    for out in hits:
        assert_exact(model, style, out)
    assert [out.cached_tokens for out in hits] == [4, 8 * w // 4 * 4]
    assert hits[1].cached_tokens > w


def test_a_hit_whose_early_window_blocks_were_evicted_serves_past_them():
    """The window group's blocks of the prompt's start are evicted; the full group still holds them: the hit
    is the full length (the window group needs only the blocks before the hit point), and exact."""
    style = "alternating"
    model = window_model(style)
    w = window_of(model)
    engine = paged(model, block_size=4, num_blocks=256, retention_interval=None)
    shared = random_prompts([40], seed=3)[0]
    engine.generate([shared], SamplingParams(max_tokens=1))
    groups = engine.cache.groups
    window_group = next(g for g in groups.others if groups.groups[g].window is not None)
    keys = list(engine.requests.values())[0].block_keys
    # the first two window blocks leave: evicted as vLLM evicts the oldest cached blocks
    for key in keys[:2]:
        physical = groups.by_hash[window_group][key]
        groups.evictable.move_to_end(physical, last=False)
    assert len(engine.cache.evict(2)) == 2
    again = engine.generate([shared[:36] + [5, 6]], SamplingParams(max_tokens=w, return_logits=True))[0]
    assert again.cached_tokens == 36
    assert_exact(model, style, again)


@pytest.mark.parametrize("position", [60, 43, 20, 5])
def test_edits_restart_where_every_window_group_still_holds_its_window(position):
    """A running request edited at m keeps the blocks before the last block boundary <= m whose window its
    window groups still hold (position 0 when they left); always exact."""
    style = "above-layer"
    model = window_model(style)
    engine = paged(model, block_size=4, num_blocks=128, max_batched_tokens=9)
    events = []
    engine.trace.listeners.append(events.append)
    rid = engine.submit(random_prompts([50])[0], SamplingParams(max_tokens=30, return_logits=True))
    while len(engine.requests[rid].output_token_ids) < 12:
        engine.step()
    engine.edit(rid, position, [7], kind="replace")
    first = [e for e in events if e["type"] == "invalidate"][-1]["first_recomputed"]
    # computed 61: the window (4) of position p needs blocks from (p - 3) // 4, held from 57 // 4 = 14 on
    assert first == (position // 4 * 4 if position >= 60 else 0)
    while engine.has_unfinished():
        engine.step()
    assert_exact(model, style, engine.output(rid))


def test_forked_samples_and_preemption_stay_exact():
    style = "alternating"
    model = window_model(style)
    engine = paged(model, block_size=4, num_blocks=24, prefix_cache=False)
    events = []
    engine.trace.listeners.append(events.append)
    outs = engine.generate(
        random_prompts([9, 14, 6], seed=4), SamplingParams(max_tokens=16, return_logits=True)
    )
    assert any(e["type"] == "request_preempted" for e in events), "the test must exercise preemption"
    for out in outs:
        assert_exact(model, style, out)
    engine = paged(model, block_size=4, num_blocks=64)
    outs = engine.generate([random_prompts([23])[0]], SamplingParams(max_tokens=12, n=2, return_logits=True))
    for request_id in engine.requests:
        assert_exact(model, style, engine.output(request_id))


def test_prompt_logprobs_after_a_hit_past_the_window_are_exact():
    """The reused span is scored again by a probe from position 0 that writes nothing the cache holds."""
    from tests.engine.worker.test_scoring import assert_exact as assert_scores_exact

    style = "above-layer"
    model = window_model(style)
    engine = paged(model, block_size=4, num_blocks=128, max_batched_tokens=5)
    shared = random_prompts([43], seed=5)[0]
    scored = SamplingParams(max_tokens=3, prompt_logprobs=True)
    first = engine.generate([shared], scored)[0]
    assert_scores_exact(engine, model, first.request_id)
    second = engine.generate([shared[:41] + [9, 9, 9]], scored)[0]
    assert second.cached_tokens == 40
    assert_scores_exact(engine, model, second.request_id)
    assert not any(rid.endswith("#score") for rid in engine.cache.groups.tables)
