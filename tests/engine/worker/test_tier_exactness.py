"""The host tier is a copy, not a recompute: with blocks loaded back from host the logits equal, bit for bit, a run
whose device pool kept them, and transformers' no-cache forward within 1e-4, on every architecture the engine
runs (full attention, GQA/MQA/MHA, window rings, 8-bit K/V) and on the embedded model."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from engine.engine import Engine, EngineConfig, SamplingParams
from tests.engine.worker.test_ring import STYLES, assert_exact, window_model
from tests.helpers.reference import greedy_generate, no_cache_logits
from tests.helpers.tiny_models import ARCHITECTURES, random_prompts, tiny_model

TOL = 1e-4


def run_documents(model, docs, **config) -> tuple[list, Counter]:
    """Each document, then each again and in reverse: they evict one another from a small pool."""
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, partial_hits=False, **config))
    seen = Counter()
    engine.trace.listeners.append(lambda event: seen.update([event["type"]]))
    outputs = []
    for doc in docs + docs + docs[::-1]:
        outputs += engine.generate([doc], SamplingParams(max_tokens=3, return_logits=True))
    return outputs, seen


def assert_bitwise_equal(kept, loaded) -> None:
    for a, b in zip(kept, loaded, strict=True):
        assert a.token_ids == b.token_ids and a.cached_tokens == b.cached_tokens
        assert torch.equal(a.logits, b.logits), f"{b.request_id}: logits differ"


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_blocks_loaded_from_host_give_the_logits_of_blocks_kept_on_the_device(arch):
    model = tiny_model(arch)
    docs = random_prompts([20, 22, 18, 25], seed=3)
    kept, seen_kept = run_documents(model, docs, num_blocks=80)
    loaded, seen = run_documents(model, docs, num_blocks=14, host_blocks=40)
    # the small pool really moved blocks both ways, and the large one never evicted
    assert seen["block_offloaded"] > 10 and seen["block_loaded"] > 10 and not seen_kept["block_evicted"]
    assert_bitwise_equal(kept, loaded)
    for out in loaded:
        sequence = out.prompt_token_ids + out.token_ids
        ref = no_cache_logits(model, sequence)[len(out.prompt_token_ids) - 1 :][: len(out.token_ids)]
        assert (out.logits - ref).abs().max().item() <= TOL


@pytest.mark.parametrize("arch", ["llama-gqa", "qwen2-gqa"])
def test_greedy_tokens_with_a_host_tier_equal_generate(arch):
    model = tiny_model(arch)
    docs = random_prompts([19, 26, 23], seed=5)
    outputs, seen = run_documents(model, docs, num_blocks=12, host_blocks=6)
    assert seen["block_loaded"] and seen["host_evicted"]
    for out in outputs:
        assert out.token_ids == greedy_generate(model, out.prompt_token_ids, 3)


@pytest.mark.parametrize("style", sorted(STYLES))
def test_window_models_with_a_host_tier_stay_exact(style):
    """Window layers keep rings, not blocks: loads serve the full-attention layers, the rings restart as they
    would on a device hit."""
    model = window_model(style)
    docs = random_prompts([21, 27, 24], seed=7)
    kept, _ = run_documents(model, docs, num_blocks=80)
    loaded, seen = run_documents(model, docs, num_blocks=16, host_blocks=40)
    assert seen["block_offloaded"]
    assert_bitwise_equal(kept, loaded)
    for out in loaded:
        assert_exact(model, style, out)


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8_e4m3"])
def test_8_bit_blocks_move_with_their_scales(kv_dtype):
    model = tiny_model("llama-gqa")
    docs = random_prompts([20, 22, 18, 25], seed=3)
    kept, _ = run_documents(model, docs, num_blocks=80, kv_dtype=kv_dtype)
    loaded, seen = run_documents(model, docs, num_blocks=14, host_blocks=40, kv_dtype=kv_dtype)
    assert seen["block_loaded"] > 10
    assert_bitwise_equal(kept, loaded)


@pytest.mark.smollm2
def test_the_embedded_model_with_a_host_tier():
    from tests.engine.models.test_smollm2 import QUESTIONS

    def answers(**config):
        engine = Engine.load(
            "smollm2", EngineConfig(device="cpu", block_size=16, partial_hits=False, **config)
        )
        seen = Counter()
        engine.trace.listeners.append(lambda event: seen.update([event["type"]]))
        prompts = [engine.encode([{"role": "user", "content": q}]) for q in QUESTIONS[:3]]
        outs = []
        for prompt in prompts + prompts:
            outs += engine.generate([prompt], SamplingParams(max_tokens=4, return_logits=True))
        return engine, outs, seen

    _, kept, _ = answers(num_blocks=64)
    engine, loaded, seen = answers(num_blocks=4, host_blocks=16)
    assert seen["block_loaded"] >= 2
    assert_bitwise_equal(kept, loaded)
    out = loaded[-1]
    assert out.token_ids == greedy_generate(engine.model, out.prompt_token_ids, 4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_cuda_the_host_tier_is_pinned_and_copies_on_its_own_stream():
    model = tiny_model("llama-gqa").to("cuda")
    docs = random_prompts([20, 22, 18, 25], seed=3)
    kept, _ = run_documents(model, docs, num_blocks=80)
    loaded, seen = run_documents(model, docs, num_blocks=14, host_blocks=40)
    assert seen["block_loaded"] > 10
    assert_bitwise_equal(kept, loaded)
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=8, host_blocks=4))
    assert engine.host_kv.kv.is_pinned() and engine.host_kv.stream is not None
