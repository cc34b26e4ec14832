"""Our paged cache must give the same logits as transformers' no-cache forward and the same greedy tokens."""

import pytest
import torch
import transformers

from engine.core.request import Request
from engine.core.scheduler import ScheduledChunk
from engine.engine import Engine, EngineConfig, SamplingParams
from tests.helpers.decode_paths import DECODE_PATHS, paged_engine
from tests.helpers.reference import greedy_generate, no_cache_logits
from tests.helpers.tiny_models import ARCHITECTURES, random_prompts, tiny_model

TOL = 1e-4


def check_logits(model, outputs):
    for out in outputs:
        sequence = out.prompt_token_ids + out.token_ids
        ref = no_cache_logits(model, sequence)
        start = len(out.prompt_token_ids) - 1
        expected = ref[start : start + len(out.token_ids)]
        assert out.logits.shape == expected.shape
        diff = (out.logits - expected).abs().max().item()
        assert diff <= TOL, f"{out.request_id}: max abs logit diff {diff}"


@pytest.mark.parametrize("decode", DECODE_PATHS)
@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_batched_chunked_logits_equal_no_cache_forward(arch, decode):
    model = tiny_model(arch)
    # small blocks and a small token budget: prompts are split into chunks that cross block boundaries
    engine = paged_engine(model, decode, block_size=4, num_blocks=96, max_batched_tokens=11)
    prompts = random_prompts([1, 3, 4, 5, 17, 30, 8, 12])
    outputs = engine.generate(prompts, SamplingParams(max_tokens=9, return_logits=True))
    check_logits(model, outputs)


@pytest.mark.parametrize("arch", ["llama-gqa", "qwen3-gqa", "llama-mqa"])
def test_every_position_of_every_prefill_chunk(arch):
    """Drive the runner chunk by chunk and compare the logits of every position, not just the last."""
    model = tiny_model(arch)
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=32))
    prompt = random_prompts([23])[0]
    ref = no_cache_logits(model, prompt)
    request = Request("r", prompt, SamplingParams(), 0.0)
    for start, end in [(0, 6), (6, 7), (7, 16), (16, 23)]:
        for logical in range(len(request.block_table), engine.cache.pool.blocks_for(end)):
            request.block_table.append(engine.cache.pool.allocate("r", logical))
        logits = engine.runner.forward([ScheduledChunk(request, start, end - start)], all_logits=True)
        request.num_computed = end
        assert (logits - ref[start:end]).abs().max().item() <= TOL


@pytest.mark.parametrize("arch", ["llama-gqa", "qwen2-gqa", "mistral-mqa"])
def test_greedy_tokens_equal_generate_alone_batched_and_chunked(arch):
    model = tiny_model(arch)
    prompts = random_prompts([2, 7, 16, 33, 5, 21, 9, 40], seed=1)
    expected = [greedy_generate(model, p, 12) for p in prompts]
    alone = Engine.from_model(model, config=EngineConfig(block_size=16, num_blocks=64))
    assert [alone.generate([p], SamplingParams(max_tokens=12))[0].token_ids for p in prompts] == expected
    batched = Engine.from_model(model, config=EngineConfig(block_size=16, num_blocks=64))
    assert [o.token_ids for o in batched.generate(prompts, SamplingParams(max_tokens=12))] == expected
    chunked = Engine.from_model(
        model, config=EngineConfig(block_size=4, num_blocks=128, max_batched_tokens=6)
    )
    assert [o.token_ids for o in chunked.generate(prompts, SamplingParams(max_tokens=12))] == expected


@pytest.mark.parametrize("decode", DECODE_PATHS)
def test_sliding_window_mask_is_exact_on_long_sequences(decode):
    """A window model (Mistral style) read through the paged pool sees exactly the positions its mask allows."""
    config = transformers.MistralConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=5,
        max_position_embeddings=512,
    )
    torch.manual_seed(3)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    engine = paged_engine(model, decode, block_size=4, num_blocks=64, max_batched_tokens=7)
    outputs = engine.generate(random_prompts([30, 3]), SamplingParams(max_tokens=25, return_logits=True))
    check_logits(model, outputs)


def test_preempted_request_stays_exact():
    """A pool too small for every request at once: decodes preempt the latest admitted, which recomputes."""
    model = tiny_model("llama-gqa")
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=14, max_batched_tokens=64))
    events = []
    engine.trace.listeners.append(events.append)
    prompts = random_prompts([10, 11, 9, 12], seed=2)
    outputs = engine.generate(prompts, SamplingParams(max_tokens=14, return_logits=True))
    assert any(e["type"] == "request_preempted" for e in events), "the test must exercise preemption"
    check_logits(model, outputs)
    assert [o.token_ids for o in outputs] == [greedy_generate(model, p, 14) for p in prompts]
    assert (
        not any(engine.cache.pool.ref_counts) and engine.cache.num_available() == engine.cache.pool.num_blocks
    )


def test_models_outside_the_attention_interface_are_refused():
    """GPT-J keeps its own attention code: paging would silently change the answer, so the engine refuses."""
    from engine.models.loading import ModelLoadError

    config = transformers.GPTJConfig(
        vocab_size=97, n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64
    )
    model = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(ModelLoadError, match="attention interface"):
        Engine.from_model(model)


def test_qwen3_moe_window_is_read_from_the_layers():
    """Qwen3-MoE applies its window on every layer, whatever max_window_layers says: read it from the modules."""
    config = transformers.Qwen3MoeConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=32,
        moe_intermediate_size=16,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        use_sliding_window=True,
        sliding_window=4,
        max_window_layers=1,
        max_position_embeddings=256,
    )
    torch.manual_seed(5)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    expected = tuple(layer.self_attn.sliding_window or None for layer in model.model.layers)
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=64, max_batched_tokens=7))
    assert engine.shape.windows == expected
    check_logits(
        model, engine.generate(random_prompts([19, 3]), SamplingParams(max_tokens=12, return_logits=True))
    )


def test_longrope_requests_do_not_change_each_other():
    """Phi-3 longrope picks its factors from the longest position in a forward: each request runs alone."""
    short = 16
    config = transformers.Phi3Config(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        pad_token_id=0,
        max_position_embeddings=256,
        original_max_position_embeddings=short,
        rope_parameters={
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "short_factor": [1.0] * 8,
            "long_factor": [4.0] * 8,
            "original_max_position_embeddings": short,
        },
    )
    torch.manual_seed(6)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=64))
    small, long = random_prompts([6, 40], seed=6)
    together = engine.generate([small, long], SamplingParams(max_tokens=4, return_logits=True))
    alone = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=64)).generate(
        [small], SamplingParams(max_tokens=4, return_logits=True)
    )[0]
    assert (together[0].logits - alone.logits).abs().max().item() <= 1e-5
    ref = no_cache_logits(model, small + alone.token_ids)
    assert (alone.logits - ref[len(small) - 1 : -1]).abs().max().item() <= 1e-4
