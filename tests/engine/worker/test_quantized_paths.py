"""Every attention path of the engine over 8-bit K/V (EngineConfig.kv_dtype): prefill chunks with and without a
cached prefix, decodes by the C kernel and by SDPA, window layers' rings, the fused step, copies on write, the
scoring probe. Each against transformers' forward with every layer's K/V rounded by the test's own quantizer
(tests/helpers/quantized_reference.py), within the 1e-4 the exact cache is held to; the exact forward is further
away, so the test can tell the two apart."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from engine.core.request import Request
from engine.core.scheduler import ScheduledChunk
from engine.engine import Engine, EngineConfig, SamplingParams
from engine.worker.run_plan import FUSED, MODULES
from kvtui.commands.info_commands import format_info
from tests.engine.worker.test_ring import STYLES, window_model
from tests.helpers.decode_paths import DECODE_PATHS, engine_with_plan, paged_engine
from tests.helpers.quantized_reference import (
    RecordedKV,
    assert_outputs_match_quantized,
    quantized_no_cache_logits,
)
from tests.helpers.reference import no_cache_logits
from tests.helpers.tiny_models import random_prompts, tiny_model

KV_DTYPES = ["int8", "fp8_e4m3"]
TOL = 1e-4


def modules_engine(model, decode: str, **config) -> Engine:
    """paged_engine's, its steps through the modules (a fused step calls no attention function to record)."""
    engine = paged_engine(model, decode, **config)
    if engine.runner.plan.step == FUSED:
        engine = engine_with_plan(model, replace(engine.runner.plan, step=MODULES), **config)
    return engine


def generate_recorded(engine: Engine, kv_dtype: str, prompts, params: SamplingParams):
    """Outputs, and the K/V the engine's attention received, every output row of it checked (RecordedKV)."""
    recorded = RecordedKV(kv_dtype)
    with recorded.recording(engine):
        outputs = engine.generate(prompts, params)
    # attention over the dequantized K/V is attention over the reference's rounding of the same K/V
    assert recorded.checked and recorded.worst <= 1e-5, recorded.worst
    return outputs, recorded


def prompts_with_a_shared_prefix() -> list[list[int]]:
    prompts = random_prompts([24, 24, 37, 19], seed=3)
    return prompts + [prompts[0][:20] + random_prompts([9], seed=4)[0]]


def assert_not_exact(model, outputs) -> None:
    """The 8-bit cache changed the answer by more than the tolerance (else the test could not tell)."""
    out = outputs[0]
    ref = no_cache_logits(model, out.prompt_token_ids + out.token_ids)
    start = len(out.prompt_token_ids) - 1
    assert (out.logits - ref[start : start + len(out.token_ids)]).abs().max().item() > 10 * TOL


@pytest.mark.parametrize("decode", DECODE_PATHS)
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize("arch", ["llama-gqa", "llama-mqa", "qwen3-gqa"])
def test_batched_chunked_decodes_equal_the_quantized_forward(arch, kv_dtype, decode):
    """Chunks of 16 (prefill over a cached prefix), a prefix hit, decodes by the C kernel or SDPA."""
    model = tiny_model(arch)
    engine = modules_engine(model, decode, kv_dtype=kv_dtype, block_size=8, max_batched_tokens=16)
    params = SamplingParams(max_tokens=10, return_logits=True)
    outputs, recorded = generate_recorded(engine, kv_dtype, prompts_with_a_shared_prefix(), params)
    # a partial hit: the tail of a block copied on write
    assert outputs[-1].cached_tokens == 20
    assert_outputs_match_quantized(model, outputs, kv_dtype, recorded)
    assert_not_exact(model, outputs)


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_every_position_of_every_prefill_chunk(kv_dtype):
    """A chunk alone, then over 6, 7 and 16 cached positions: every row, not just the last."""
    model = tiny_model("llama-gqa")
    engine = modules_engine(model, "kernel", block_size=4, num_blocks=32, kv_dtype=kv_dtype)
    prompt = random_prompts([23])[0]
    request = Request("r", prompt, SamplingParams(), 0.0)
    recorded, rows = RecordedKV(kv_dtype), []
    with recorded.recording(engine):
        for start, end in [(0, 6), (6, 7), (7, 16), (16, 23)]:
            for logical in range(len(request.block_table), engine.cache.pool.blocks_for(end)):
                request.block_table.append(engine.cache.pool.allocate("r", logical))
            rows.append(engine.runner.forward([ScheduledChunk(request, start, end - start)], all_logits=True))
            request.num_computed = end
    assert recorded.checked == 23 * 3 and recorded.worst <= 1e-5
    ref = quantized_no_cache_logits(model, prompt, kv_dtype, recorded=recorded)
    assert (torch.cat(rows) - ref).abs().max().item() <= TOL


@pytest.mark.parametrize("decode", DECODE_PATHS)
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize("style", sorted(STYLES))
def test_rings_and_full_layers_equal_the_quantized_forward(style, kv_dtype, decode):
    """Window layers' rings (chunks of 7 crossing the window edge, sequences past 10 x W) with full layers paged;
    Gemma 2's scores soft-capped (transformers' eager attention is its reference)."""
    model = window_model(style)
    w = model.config.sliding_window
    engine = modules_engine(
        model, decode, kv_dtype=kv_dtype, block_size=4, num_blocks=128, max_batched_tokens=7
    )
    prompts = random_prompts([1, w + 1, 10 * w + 3, 2 * w - 1])
    params = SamplingParams(max_tokens=3 * w, return_logits=True)
    outputs, recorded = generate_recorded(engine, kv_dtype, prompts, params)
    assert_outputs_match_quantized(model, outputs, kv_dtype, recorded, eager=STYLES[style][2] == "eager")
    assert engine.rings.pool[0].dtype == torch.uint8


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_the_fused_step_gives_the_modules_logits_to_the_bit(kv_dtype):
    model = tiny_model("llama-gqa")
    config = dict(kv_dtype=kv_dtype, block_size=8, max_batched_tokens=48)
    fused = Engine.from_model(model, config=EngineConfig(**config))
    if fused.runner.plan.step != FUSED:
        pytest.skip(fused.runner.plan.describe())
    modules = engine_with_plan(model, replace(fused.runner.plan, step=MODULES), **config)
    params = SamplingParams(max_tokens=10, return_logits=True)
    ours = fused.generate(prompts_with_a_shared_prefix(), params)
    theirs, recorded = generate_recorded(modules, kv_dtype, prompts_with_a_shared_prefix(), params)
    for a, b in zip(ours, theirs, strict=True):
        assert a.token_ids == b.token_ids and torch.equal(a.logits, b.logits)
    assert_outputs_match_quantized(model, ours, kv_dtype, recorded)


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_forks_copy_quantized_rows_with_their_scales(kv_dtype):
    """Samples of one prompt share its blocks; the partial block is copied on write, scales and all."""
    model = tiny_model("llama-gqa")
    engine = modules_engine(model, "kernel", kv_dtype=kv_dtype, block_size=8)
    prompt = random_prompts([21], seed=5)[0]
    params = SamplingParams(max_tokens=6, n=3, temperature=1.0, seed=1, return_logits=True)
    outputs, recorded = generate_recorded(engine, kv_dtype, [prompt], params)
    parent = outputs[0].request_id
    samples = [engine.output(i) for i in [parent, *engine.requests[parent].children]]
    assert len({tuple(s.token_ids) for s in samples}) > 1
    assert_outputs_match_quantized(model, samples, kv_dtype, recorded)


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_prompt_log_probabilities_through_the_scoring_probe(kv_dtype):
    model = tiny_model("llama-gqa")
    engine = modules_engine(model, "kernel", kv_dtype=kv_dtype, block_size=4, max_batched_tokens=8)
    prompt = random_prompts([30], seed=6)[0]
    recorded = RecordedKV(kv_dtype)
    with recorded.recording(engine):
        score = engine.score(prompt)
    assert recorded.checked and recorded.worst <= 1e-5
    ref = torch.log_softmax(quantized_no_cache_logits(model, prompt, kv_dtype, recorded=recorded), -1)
    expected = [ref[i, prompt[i + 1]].item() for i in range(len(prompt) - 1)]
    assert max(abs(a - b) for a, b in zip(score.logprobs[1:], expected, strict=True)) <= TOL


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_the_pool_holds_bytes_per_block_and_the_header_says_so(kv_dtype):
    model = tiny_model("llama-gqa")
    engine = Engine.from_model(model, config=EngineConfig(kv_dtype=kv_dtype, kv_memory_mb=1))
    exact = Engine.from_model(model, config=EngineConfig(kv_memory_mb=1))
    shape = engine.shape
    # 3 layers x 2 x 2 KV heads x (head_dim 8 bytes + a 4-byte scale)
    assert shape.kv_bytes_per_token() == 3 * 2 * 2 * (8 + 4) == 144
    assert exact.shape.kv_bytes_per_token() == 3 * 2 * 2 * 8 * 4
    assert engine.kv.nbytes == shape.kv_bytes_per_block(16) * engine.cache.pool.num_blocks
    # the same budget buys more blocks
    assert engine.cache.pool.num_blocks == 2**20 // (144 * 16)
    header = engine.trace.header
    assert header["kv_dtype"] == kv_dtype and header["config"]["kv_dtype"] == kv_dtype
    assert header["bytes_per_token"] == 144 and header["model"]["kv_dtype"] == kv_dtype
    assert exact.trace.header["kv_dtype"] is None and "kv_dtype" not in exact.trace.header["model"]


def test_fp8_is_an_alias_and_unknown_names_are_refused():
    assert EngineConfig(kv_dtype="fp8").kv_dtype == "fp8_e4m3"
    with pytest.raises(ValueError, match="kv_dtype"):
        EngineConfig(kv_dtype="int4")


def test_info_and_the_run_plan_say_how_k_v_are_stored():
    engine = Engine.from_model(tiny_model("llama-gqa"), config=EngineConfig(kv_dtype="fp8", kv_memory_mb=1))
    info = format_info(engine)
    assert "K/V stored     fp8_e4m3" in info
    assert "2 x 2 kv_heads x (8 x 1 B fp8_e4m3 + a 4 B float32 scale) = 48 B per layer" in info
    assert f"pool tensor    {engine.kv.nbytes:,} B" in info
    assert "K/V storage        fp8_e4m3" in engine.runner.plan.describe()
    assert "K/V storage" not in Engine.from_model(tiny_model("llama-gqa")).runner.plan.describe()
