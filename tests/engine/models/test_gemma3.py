"""Gemma 3 270M (base; 15 sliding-window layers with W=512 in rings, 3 full layers in the paged pool) through our
cache: exact against transformers on a short prompt and on prompts past the window, with prefix hits, an edit
past the window and preemption; and with window_layout="paged" (vLLM's six KV-cache groups), exact on a prompt
past the window and on a prefix hit past it. The first run dequantizes the model (about a minute); later ones load
the copy.

Kept to a few forwards (a 262k vocabulary makes every logit row costly): the long-prompt references compute
only the logits they compare (logits_to_keep)."""

import pytest
import torch

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.models.loading import stock_attention
from tests.helpers.reference import greedy_generate, no_cache_logits

pytestmark = pytest.mark.gemma3

STORY = (
    "The old lighthouse keeper climbed the stairs every evening, counting each step as his father had taught "
    "him, and every evening the sea told him a different story. "
)
W = 512


@pytest.fixture(scope="module")
def engine():
    engine = Engine.load(
        "gemma3", EngineConfig(device="cpu", block_size=16, num_blocks=160, max_batched_tokens=256)
    )
    engine.events = []
    engine.trace.listeners.append(engine.events.append)
    return engine


def of_type(engine, kind, request_id):
    return [e for e in engine.events if e["type"] == kind and e.get("request_id") == request_id]


@torch.inference_mode()
def reference_logits(model, sequence: list[int], last: int) -> torch.Tensor:
    """No-cache logits of the last `last` positions of `sequence` (transformers' own attention, one forward)."""
    with stock_attention(model):
        return model(torch.tensor([sequence]), use_cache=False, logits_to_keep=last).logits[0].float()


def assert_exact(engine, out):
    sequence = out.prompt_token_ids + out.token_ids
    ref = reference_logits(engine.model, sequence, len(out.token_ids) + 1)[:-1]
    diff = (out.logits - ref).abs().max().item()
    assert diff <= 1e-4, diff
    # greedy: each token is the argmax of the reference row
    assert out.token_ids == ref.argmax(-1).tolist()


def long_prompt(engine, repeats=20):
    ids = engine.encode(STORY * repeats)
    # the window layers' rings wrap
    assert len(ids) > W + 64
    return ids


def test_shape_is_hybrid_15_window_3_full_and_the_pool_pages_only_the_full_layers(engine):
    shape = engine.shape
    assert (shape.layers, shape.q_heads, shape.kv_heads, shape.head_dim) == (18, 4, 1, 256)
    assert shape.windows == tuple(None if i % 6 == 5 else W for i in range(18))
    assert shape.paged_layers == [5, 11, 17]
    # 3 layers in the pool, not 18
    assert engine.kv.nbytes == 2 * 3 * 1 * 256 * 4 * 16 * 160
    # a base model: prompts are plain text
    assert not engine.tokenizer.chat_template


def test_short_prompt_logits_and_greedy_tokens_equal_transformers(engine):
    ids = engine.encode("Once upon a time, there was a little")
    out = engine.generate([ids], SamplingParams(max_tokens=12, return_logits=True))[0]
    assert out.token_ids == greedy_generate(engine.model, ids, 12)
    assert out.text.startswith(" girl named Lily.")
    ref = no_cache_logits(engine.model, ids + out.token_ids)
    diff = (out.logits - ref[len(ids) - 1 : -1]).abs().max().item()
    assert diff <= 1e-4, diff


def test_long_prompt_wraps_the_rings_and_stays_exact(engine):
    ids = long_prompt(engine)
    out = engine.generate([ids], SamplingParams(max_tokens=3, return_logits=True))[0]
    assert_exact(engine, out)
    writes = of_type(engine, "ring_write", out.request_id)
    assert {w["window"] for w in writes} == {W}
    assert sorted({layer for w in writes for layer in w.get("layers", [])}) == [
        i for i in range(18) if i % 6 != 5
    ]
    overwritten = sorted(p for w in writes for p in w["evicted"])
    # position t reads t-W+1..t
    assert overwritten[:2] == [0, 1] and overwritten[-1] == len(ids) + 1 - W


def test_prefix_hit_past_the_window_resumes_the_rings_and_stays_exact(engine):
    ids = long_prompt(engine)
    follow = ids + list(engine.tokenizer(" One night a ship", add_special_tokens=False)["input_ids"])
    out = engine.generate([follow], SamplingParams(max_tokens=3, return_logits=True))[0]
    resume = of_type(engine, "ring_resume", out.request_id)
    # the full layers' blocks match the whole shared story (cached by the earlier test), but the window layers
    # need the K/V of the W-1 positions before the restart point: they restart from the ring snapshot taken at
    # position 512, so the cache resumes there and recomputes the rest through every layer
    assert resume and resume[0]["wanted"] >= len(ids) - 16
    assert resume[0]["source"] == "snapshot" and resume[0]["position"] == W == out.cached_tokens
    assert_exact(engine, out)


def test_edit_past_the_window_recomputes_from_m_and_stays_exact(engine):
    ids = long_prompt(engine)
    rid = engine.submit(ids, SamplingParams(max_tokens=3, return_logits=True))
    while engine.requests[rid].finish_reason is None:
        engine.step()
    m = W + 40
    event = engine.edit(rid, m, " storm", "replace")
    # the full layers keep [0, m); the window layers restart from their ring snapshot at 512 (they need the
    # W-1 positions before m), so the recompute starts there
    resume = of_type(engine, "ring_resume", rid)[-1]
    assert (resume["wanted"], resume["position"], resume["source"]) == (m, W, "snapshot")
    assert event["first_recomputed"] == W
    while engine.requests[rid].finish_reason is None:
        engine.step()
    out = engine.output(rid)
    assert out.prompt_token_ids[:m] == ids[:m] and out.prompt_token_ids != ids
    assert_exact(engine, out)


def test_preemption_recomputes_exactly(engine):
    # 4 whole blocks
    ids = engine.encode(STORY * 3)[:64]
    # differ from position 1: no block shared
    prompts = [ids, ids[:1] + ids[2:] + ids[1:2]]
    params = SamplingParams(max_tokens=6)
    roomy = engine.generate(prompts, params)
    # both prompts fit; their first decodes need a fifth block each, and one is left
    blocks = 2 * 4 + 1
    small = Engine.from_model(
        engine.model, engine.tokenizer, EngineConfig(block_size=16, num_blocks=blocks, prefix_cache=False)
    )
    events = []
    small.trace.listeners.append(events.append)
    tight = small.generate(prompts, params)
    assert any(e["type"] == "request_preempted" for e in events), "the test must exercise preemption"
    assert [o.token_ids for o in tight] == [o.token_ids for o in roomy]


def test_chat_messages_are_refused_with_a_reason(engine):
    with pytest.raises(ValueError, match="no chat template"):
        engine.submit([{"role": "user", "content": "Hi"}])


# --- window_layout="paged": vLLM's hybrid layout (six KV-cache groups of 3 layers sharing the pool) ------------
@pytest.fixture(scope="module")
def paged(engine):
    paged = Engine.from_model(
        engine.model,
        engine.tokenizer,
        EngineConfig(
            device="cpu", block_size=16, num_blocks=400, max_batched_tokens=256, window_layout="paged"
        ),
    )
    paged.events = []
    paged.trace.listeners.append(paged.events.append)
    return paged


def test_paged_layout_is_six_groups_of_three_layers_sharing_one_pool(paged):
    groups = paged.cache.groups.groups
    assert [g.kind for g in groups] == ["sliding_window"] * 5 + ["full_attention"]
    assert [g.layers for g in groups][5] == (5, 11, 17) and groups[0].layers == (0, 6, 12)
    # a block holds 3 layers' K/V whichever group it serves
    assert paged.kv.nbytes == 2 * 3 * 1 * 256 * 4 * 16 * 400


def test_paged_long_prompt_releases_window_blocks_and_stays_exact(paged):
    ids = long_prompt(paged)
    out = paged.generate([ids], SamplingParams(max_tokens=3, return_logits=True))[0]
    assert_exact(paged, out)
    finished = next(i for i, e in enumerate(paged.events) if e["type"] == "request_finished")
    released = [e for e in paged.events[:finished] if e["type"] == "block_released" and e["group"] != 5]
    # chunks of 256: the window groups give back the blocks before each chunk's window
    assert released


def test_paged_prefix_hit_past_the_window_is_served_whole_and_exact(paged):
    ids = long_prompt(paged)
    follow = ids + list(paged.tokenizer(" One night a ship", add_special_tokens=False)["input_ids"])
    out = paged.generate([follow], SamplingParams(max_tokens=3, return_logits=True))[0]
    # every group holds what the hit needs: the full group every block, the window groups the last 32 blocks
    assert out.cached_tokens == len(ids) // 16 * 16 > W
    assert_exact(paged, out)
