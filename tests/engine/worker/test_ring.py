"""Window layers in O(W) rings (engine/core/rings.py, engine/worker/ring_tensors.py), exact against transformers'
no-cache forward (fp32)."""

import pytest
import torch
import transformers

from engine.core.request import Request
from engine.core.scheduler import ScheduledChunk
from engine.engine import Engine, EngineConfig, SamplingParams
from engine.models.loading import ModelLoadError, describe, layer_windows, stock_attention
from kvtui.commands.info_commands import format_info
from tests.helpers.decode_paths import DECODE_PATHS, paged_engine
from tests.helpers.tiny_models import random_prompts

TOL = 1e-4
SMALL = dict(vocab_size=97, hidden_size=64, intermediate_size=96, max_position_embeddings=512)

# name -> (config class, fields, attention implementation of the reference); every one GQA
STYLES = {
    "all-window": (
        "MistralConfig",
        dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, sliding_window=5),
        "sdpa",
    ),
    "alternating": (
        "Gemma3TextConfig",
        dict(
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            sliding_window=6,
            layer_types=["sliding_attention", "full_attention"] * 2,
        ),
        "sdpa",
    ),
    "softcap-alternating": (
        "Gemma2Config",
        dict(
            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1, head_dim=16, sliding_window=4
        ),
        "eager",
    ),
    "above-layer": (
        "Qwen2Config",
        dict(
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            use_sliding_window=True,
            sliding_window=4,
            max_window_layers=1,
        ),
        "sdpa",
    ),
}


def window_model(style: str, seed: int = 0):
    class_name, fields, _ = STYLES[style]
    config = getattr(transformers, class_name)(**SMALL, **fields)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    return model


def reference(model, style, tokens, mask=None):
    with stock_attention(model, STYLES[style][2]), torch.inference_mode():
        ids = torch.tensor([tokens])
        return model(ids, attention_mask=mask, use_cache=False).logits[0].float()


def assert_exact(model, style, out, tokens=None):
    tokens = tokens or out.prompt_token_ids + out.token_ids
    ref = reference(model, style, tokens)
    # the k logits rows chose the last k tokens (after an edit: fewer)
    n, k = len(tokens), out.logits.shape[0]
    diff = (out.logits - ref[n - 1 - k : n - 1]).abs().max().item()
    assert diff <= TOL, f"{out.request_id}: max abs logit diff {diff}"


def window_of(model) -> int:
    return model.config.sliding_window


def test_window_styles_are_read_per_layer():
    assert describe(window_model("all-window")).windows == (5, 5)
    assert describe(window_model("alternating")).windows == (6, None, 6, None)
    assert describe(window_model("softcap-alternating")).windows == (4, None, 4)
    assert describe(window_model("above-layer")).windows == (None, 4, 4)
    shape = describe(window_model("alternating"))
    assert shape.paged_layers == [1, 3] and shape.window_layers == [0, 2]
    chunked = transformers.Qwen2Config(**SMALL, num_hidden_layers=2, layer_types=["chunked_attention"] * 2)
    with pytest.raises(ModelLoadError, match="chunked_attention"):
        layer_windows(chunked)


@pytest.mark.parametrize("decode", DECODE_PATHS)
@pytest.mark.parametrize("style", sorted(STYLES))
def test_batched_chunked_generation_is_exact(style, decode):
    """Many requests at once, chunks of 7 crossing the window edge, sequences past 10 x W; decodes batched (the
    full layers' decodes by the C kernel or by torch; Gemma 2's with soft-capped scores)."""
    model = window_model(style)
    w = window_of(model)
    engine = paged_engine(model, decode, block_size=4, num_blocks=128, max_batched_tokens=7)
    prompts = random_prompts([1, 3, w, w + 1, 10 * w + 3, 2 * w - 1])
    outputs = engine.generate(prompts, SamplingParams(max_tokens=3 * w, return_logits=True))
    for out in outputs:
        assert_exact(model, style, out)
    # rings freed at finish
    assert engine.cache.rings.bytes_in_use() == 0 and not engine.cache.rings.states


@pytest.mark.parametrize("style", ["all-window", "alternating"])
def test_every_position_of_chunks_crossing_the_window_edge(style):
    model = window_model(style)
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=32))
    prompt = random_prompts([40])[0]
    ref = reference(model, style, prompt)
    request = Request("r", prompt, SamplingParams(), 0.0)
    # shorter and longer than W
    for start, end in [(0, 3), (3, 4), (4, 17), (17, 18), (18, 19), (19, 40)]:
        for logical in range(len(request.block_table), engine.cache.pool.blocks_for(end)):
            request.block_table.append(engine.cache.pool.allocate("r", logical))
        chunks = [ScheduledChunk(request, start, end - start)]
        logits = engine.runner.forward(chunks, all_logits=True)
        # the step's ring commit, as the engine core makes it after a forward
        engine.rings.commit(engine.cache.rings.commit(chunks))
        request.num_computed = end
        assert (logits - ref[start:end]).abs().max().item() <= TOL, (start, end)


def test_ring_memory_stays_constant_to_10_w_and_the_trace_shows_overwrites():
    model = window_model("all-window")
    w = window_of(model)
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=64))
    events = []
    engine.trace.listeners.append(events.append)
    engine.submit(random_prompts([3])[0], SamplingParams(max_tokens=10 * w))
    in_use, allocated = set(), set()
    while engine.has_unfinished():
        engine.step()
        if engine.cache.rings.states:
            in_use.add(engine.cache.rings.bytes_in_use())
            allocated.add(engine.rings.nbytes)
    # K and V x 2 layers x W slots x 2 kv heads x head dim 16 x fp32
    per_request = 2 * 2 * w * 2 * 16 * 4
    assert in_use == {per_request} and len(allocated) == 1
    # no full-attention layer: nothing in the paged pool
    assert engine.kv.nbytes == 0
    writes = [e for e in events if e["type"] == "ring_write"]
    decodes = [e for e in writes if e["end"] - e["start"] == 1 and e["start"] >= w]
    assert len(decodes) >= 8 * w
    # each decode overwrites position p - W
    assert all(e["evicted"] == [e["start"] - w] for e in decodes)
    assert {e["group"] for e in writes} == {0} and writes[0]["layers"] == [0, 1]


def test_info_shows_full_and_window_layer_bytes():
    engine = Engine.from_model(window_model("alternating"), config=EngineConfig(block_size=4, num_blocks=8))
    text = format_info(engine)
    assert "2 full" in text and "2 sliding window" in text
    ring = engine.shape.ring_bytes_per_request()
    assert ring == 2 * 6 * 2 * 2 * 16 * 4 and f"{ring:,} B per request" in text
    # K/V x 2 full layers x kv heads x dim x fp32 x tokens
    assert engine.kv.nbytes == 2 * 2 * 2 * 16 * 4 * 4 * 8


@pytest.mark.parametrize(
    "position,prefix_cache", [(60, False), (43, False), (20, False), (5, False), (60, True), (22, True)]
)
def test_edits_restart_exactly_inside_and_outside_the_window(position, prefix_cache):
    """A running request edited at m: its ring (m >= head - 1), a snapshot, or position 0; always exact."""
    style = "above-layer"
    model = window_model(style)
    engine = Engine.from_model(
        model,
        config=EngineConfig(block_size=4, num_blocks=64, max_batched_tokens=9, prefix_cache=prefix_cache),
    )
    events = []
    engine.trace.listeners.append(events.append)
    rid = engine.submit(random_prompts([50])[0], SamplingParams(max_tokens=30, return_logits=True))
    while len(engine.requests[rid].output_token_ids) < 12:
        engine.step()
    head = engine.cache.rings.states[rid].head
    assert head == 61
    engine.edit(rid, position, [7], kind="replace")
    resume = [e for e in events if e["type"] == "ring_resume"][-1]
    interval = engine.cache.rings.interval
    expected = position if position >= head - 1 else position // interval * interval
    assert (resume["position"], resume["recompute_tokens"]) == (expected, position - expected)
    while engine.has_unfinished():
        engine.step()
    assert_exact(model, style, engine.output(rid))


def test_edit_of_a_finished_request_and_prefix_hits_resume_from_snapshots():
    style = "all-window"
    model = window_model(style)
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=128))
    events = []
    engine.trace.listeners.append(events.append)
    shared = random_prompts([43], seed=5)[0]
    first = engine.generate([shared], SamplingParams(max_tokens=6, return_logits=True))[0]
    assert_exact(model, style, first)
    # a prefix hit: the tree matches 40 tokens; window layers restart at the last snapshot boundary <= 40
    second = engine.generate([shared[:41] + [9, 9, 9]], SamplingParams(max_tokens=6, return_logits=True))[0]
    assert_exact(model, style, second)
    resume = [e for e in events if e["type"] == "ring_resume"][-1]
    assert (
        resume["source"] == "snapshot"
        and resume["position"] == 40 // engine.cache.rings.interval * engine.cache.rings.interval
    )
    assert second.cached_tokens == resume["position"]
    # an edit of the finished first request, 8 tokens before its end
    engine.edit(first.request_id, 41, [11], kind="replace")
    while engine.has_unfinished():
        engine.step()
    assert_exact(model, style, engine.output(first.request_id))


def test_without_snapshots_restarts_from_the_start_and_stays_exact():
    style = "alternating"
    model = window_model(style)
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=64))
    engine.cache.rings.snapshot_budget = 0
    events = []
    engine.trace.listeners.append(events.append)
    prompt = random_prompts([30], seed=2)[0]
    engine.generate([prompt], SamplingParams(max_tokens=4))
    again = engine.generate([prompt + [5, 6]], SamplingParams(max_tokens=4, return_logits=True))[0]
    assert_exact(model, style, again)
    match = [e for e in events if e["type"] == "prefix_match"][-1]
    assert match["reason"] == "window" and match["matched_tokens"] == 0
    assert [e["source"] for e in events if e["type"] == "ring_resume"] == ["start"]


def test_forked_samples_copy_the_ring():
    style = "all-window"
    model = window_model(style)
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=64))
    outs = engine.generate([random_prompts([23])[0]], SamplingParams(max_tokens=12, n=2, return_logits=True))
    for request_id in [outs[0].request_id] + [r for r in engine.requests if r != outs[0].request_id]:
        assert_exact(model, style, engine.output(request_id))


def sink_mask(length: int, sinks: int, window: int) -> torch.Tensor:
    q, k = torch.arange(length)[:, None], torch.arange(length)[None, :]
    return ((k <= q) & ((k > q - window) | (k < sinks)))[None, None]


def test_attention_sinks_are_exact_to_their_own_mask_and_report_the_divergence():
    """StreamingLLM on a full-attention model: first S + last W on every layer; the answer moves, and says so."""
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.LlamaConfig(**SMALL, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
        dtype=torch.float32,
    ).eval()
    model.generation_config.eos_token_id = None
    sinks, window = 2, 6
    engine = Engine.from_model(
        model,
        config=EngineConfig(
            block_size=4, num_blocks=64, max_batched_tokens=5, sink_tokens=sinks, window=window
        ),
    )
    assert engine.shape.windows == (window, window) and engine.kv.nbytes == 0
    events = []
    engine.trace.listeners.append(events.append)
    outs = engine.generate(random_prompts([20, 5]), SamplingParams(max_tokens=30, return_logits=True))
    for out in outs:
        tokens = out.prompt_token_ids + out.token_ids
        with stock_attention(model), torch.inference_mode():
            ref = model(torch.tensor([tokens]), attention_mask=sink_mask(len(tokens), sinks, window)).logits[
                0
            ]
        start = len(out.prompt_token_ids) - 1
        assert (out.logits - ref[start : start + len(out.token_ids)]).abs().max().item() <= TOL
    divergence = {e["request_id"]: e for e in events if e["type"] == "sink_divergence"}
    assert set(divergence) == {o.request_id for o in outs}
    # 50 tokens >> S + W: the answer moved
    assert all(e["max_logit_diff"] > 1e-3 for e in divergence.values())
    assert engine.cache.rings.bytes_in_use() == 0


def test_sinks_on_a_hybrid_model_keep_the_narrower_native_window():
    """Two ring groups (native W=6 with sinks, former full layers W=8 with sinks); oracle: one mask per layer type."""
    model = window_model("alternating")
    engine = Engine.from_model(
        model, config=EngineConfig(block_size=4, num_blocks=32, max_batched_tokens=6, sink_tokens=1, window=8)
    )
    assert engine.shape.windows == (6, 8, 6, 8) and len(engine.cache.rings.groups) == 2
    out = engine.generate(random_prompts([25])[0], SamplingParams(max_tokens=10, return_logits=True))[0]
    tokens = out.prompt_token_ids + out.token_ids
    masks = {
        "full_attention": sink_mask(len(tokens), 1, 8),
        "sliding_attention": sink_mask(len(tokens), 1, 6),
    }
    ref = reference(model, "alternating", tokens, masks)
    start = len(out.prompt_token_ids) - 1
    assert (out.logits - ref[start : start + len(out.token_ids)]).abs().max().item() <= TOL


def test_preempted_requests_free_their_rings_and_recompute_exactly():
    style = "alternating"
    model = window_model(style)
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=14, prefix_cache=False))
    events = []
    engine.trace.listeners.append(events.append)
    outs = engine.generate(
        random_prompts([9, 14, 6], seed=4), SamplingParams(max_tokens=16, return_logits=True)
    )
    assert any(e["type"] == "request_preempted" for e in events), "the test must exercise preemption"
    for out in outs:
        assert_exact(model, style, out)
    rings = engine.cache.rings
    assert (
        not rings.states
        and len(rings.free_rows) * rings.bytes_per_request() == rings.nbytes == engine.rings.nbytes
    )


def test_two_edits_without_a_step_between_restart_where_the_ring_still_holds_the_window():
    """The first edit moves the ring's head back one position without unwriting the position after it, which
    overwrote a slot; a second edit one position further back must not restart in the ring."""
    from tests.helpers.reference import greedy_generate
    from tests.helpers.tiny_models import tiny_model

    small = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=32, num_attention_heads=4)
    model = tiny_model("mistral-mqa", sliding_window=3, num_key_value_heads=1, **small)
    engine = Engine.from_model(model, config=EngineConfig(block_size=3, num_blocks=9, max_batched_tokens=5))
    events = []
    engine.trace.listeners.append(events.append)
    rid = engine.submit([10, 11, 12, 13, 14, 3, 4, 3], SamplingParams(max_tokens=3))
    for _ in range(3):
        engine.step()
    # the first generated token (position 8) replaced, then deleted
    engine.edit(rid, 8, [3], "replace")
    engine.edit(rid, 8, 1, "delete")
    resume = [e for e in events if e["type"] == "ring_resume"][-1]
    assert resume["wanted"] == 7 and resume["source"] != "ring"
    while engine.has_unfinished():
        engine.step()
    req = engine.requests[rid]
    assert req.output_token_ids == greedy_generate(model, req.prompt_token_ids, 3)
