"""The same exactness checks on a CUDA GPU, in fp32 and bf16; skipped where torch sees no GPU."""

import pytest
import torch

from engine.engine import Engine, EngineConfig, SamplingParams
from tests.helpers.reference import greedy_generate, no_cache_logits
from tests.helpers.tiny_models import random_prompts, tiny_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("arch", ["llama-gqa", "qwen3-gqa", "llama-mqa"])
def test_fp32_logits_on_cuda_equal_no_cache_forward(arch):
    model = tiny_model(arch).to("cuda")
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=96, max_batched_tokens=11))
    outputs = engine.generate(
        random_prompts([3, 17, 30, 8]), SamplingParams(max_tokens=9, return_logits=True)
    )
    for out in outputs:
        ref = no_cache_logits(model, out.prompt_token_ids + out.token_ids).cpu()
        start = len(out.prompt_token_ids) - 1
        assert (out.logits - ref[start : start + len(out.token_ids)]).abs().max().item() <= 1e-4


def test_bf16_greedy_tokens_on_cuda_follow_generate():
    model = tiny_model("llama-gqa").to("cuda", torch.bfloat16)
    engine = Engine.from_model(model, config=EngineConfig(block_size=16, num_blocks=64))
    prompts = random_prompts([7, 16, 33], seed=1)
    outs = engine.generate(prompts, SamplingParams(max_tokens=8, return_logits=True))
    for prompt, out in zip(prompts, outs):
        ref = no_cache_logits(model, out.prompt_token_ids + out.token_ids).cpu()
        start = len(prompt) - 1
        # bf16 rounds differently along different kernels: compare against the reference's own scale
        assert (out.logits - ref[start : start + 8]).abs().max().item() <= 0.05 * ref.abs().max().item()
        assert out.token_ids[:4] == greedy_generate(model, prompt, 4)


def _exact(model, outputs, tol=1e-4):
    for out in outputs:
        ref = no_cache_logits(model, out.prompt_token_ids + out.token_ids).cpu()
        n, k = len(out.prompt_token_ids) + len(out.token_ids), out.logits.shape[0]
        diff = (out.logits - ref[n - 1 - k : n - 1]).abs().max().item()
        assert diff <= tol, f"{out.request_id}: max abs logit diff {diff}"


def test_chunks_over_a_cached_prefix_on_cuda_are_exact():
    """Shared prefixes and chunked prefills: every chunk after the first attends over a cached prefix (the
    CUDA lower-right causal path of engine/worker/sdpa.py) and reads whole blocks."""
    model = tiny_model("llama-gqa").to("cuda")
    engine = Engine.from_model(
        model, config=EngineConfig(block_size=4, num_blocks=256, max_batched_tokens=13)
    )
    shared = random_prompts([40], seed=3)[0]
    tails = random_prompts([5, 9, 1, 17], seed=4)
    first = engine.generate([shared + tails[0]], SamplingParams(max_tokens=6, return_logits=True))
    rest = engine.generate([shared + t for t in tails[1:]], SamplingParams(max_tokens=6, return_logits=True))
    assert all(o.cached_tokens >= 36 for o in rest)
    _exact(model, first + rest)


def test_edit_of_a_running_request_on_cuda_is_exact():
    model = tiny_model("qwen3-gqa").to("cuda")
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=128, max_batched_tokens=9))
    rid = engine.submit(random_prompts([30], seed=5)[0], SamplingParams(max_tokens=12, return_logits=True))
    while len(engine.requests[rid].output_token_ids) < 5:
        engine.step()
    engine.edit(rid, 13, [11], kind="replace")
    while engine.has_unfinished():
        engine.step()
    _exact(model, [engine.output(rid)])


def _window_model(style: str):
    import transformers

    small = dict(vocab_size=97, hidden_size=64, intermediate_size=96, max_position_embeddings=512)
    if style == "all-window":
        config = transformers.MistralConfig(
            **small, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, sliding_window=5
        )
    else:
        config = transformers.Gemma3TextConfig(
            **small,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            sliding_window=6,
            layer_types=["sliding_attention", "full_attention"] * 2,
        )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval().to("cuda")
    model.generation_config.eos_token_id = None
    return model


@pytest.mark.parametrize("style", ["all-window", "alternating"])
def test_rings_on_cuda_are_exact_through_chunks_and_edits(style):
    model = _window_model(style)
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=128, max_batched_tokens=7))
    outs = engine.generate(
        random_prompts([23, 4, 31], seed=6), SamplingParams(max_tokens=15, return_logits=True)
    )
    _exact(model, outs)
    rid = engine.submit(random_prompts([26], seed=7)[0], SamplingParams(max_tokens=14, return_logits=True))
    while len(engine.requests[rid].output_token_ids) < 6:
        engine.step()
    # inside the window of the head: resumes from the ring or snapshot
    engine.edit(rid, 20, [9], kind="replace")
    while engine.has_unfinished():
        engine.step()
    _exact(model, [engine.output(rid)])


def test_attention_sinks_on_cuda_are_exact_to_their_own_mask():
    import transformers

    from engine.models.loading import stock_attention

    config = transformers.LlamaConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval().to("cuda")
    model.generation_config.eos_token_id = None
    sinks, window = 2, 6
    engine = Engine.from_model(
        model,
        config=EngineConfig(
            block_size=4, num_blocks=64, max_batched_tokens=5, sink_tokens=sinks, window=window
        ),
    )
    for out in engine.generate(random_prompts([20, 5]), SamplingParams(max_tokens=20, return_logits=True)):
        tokens = out.prompt_token_ids + out.token_ids
        q, k = torch.arange(len(tokens))[:, None], torch.arange(len(tokens))[None, :]
        mask = ((k <= q) & ((k > q - window) | (k < sinks)))[None, None].to("cuda")
        with stock_attention(model), torch.inference_mode():
            ref = model(torch.tensor([tokens], device="cuda"), attention_mask=mask).logits[0].float().cpu()
        start = len(out.prompt_token_ids) - 1
        assert (out.logits - ref[start : start + len(out.token_ids)]).abs().max().item() <= 1e-4


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)])
def test_chunk_over_prefix_kernel_on_cuda_equals_one_masked_call(dtype, tol):
    from engine.worker.sdpa import attend, causal_mask, chunk_over_prefix

    torch.manual_seed(0)
    q = torch.randn(1, 8, 37, 64, device="cuda", dtype=dtype)
    k = torch.randn(1, 2, 300 + 37, 64, device="cuda", dtype=dtype)
    v = torch.randn(1, 2, 300 + 37, 64, device="cuda", dtype=dtype)
    ours = chunk_over_prefix(q, k[:, :, :300], v[:, :, :300], k[:, :, 300:], v[:, :, 300:], None, None)
    ref = attend(q.float(), k.float(), v.float(), causal_mask(37, 337, "cuda"), None, None)
    assert (ours.float() - ref).abs().max().item() <= tol


def test_random_llama_1b_in_bf16_decodes_a_batch_on_cuda():
    from engine.models.loading import load_model

    model, tokenizer, name = load_model("random:llama:1b", device="cuda", dtype="bfloat16")
    assert name == "random:llama:1b" and tokenizer is None
    engine = Engine.from_model(model, config=EngineConfig(block_size=16, num_blocks=512))
    outs = engine.generate(
        random_prompts([100, 37, 250], vocab=1000, seed=8), SamplingParams(max_tokens=8, return_logits=True)
    )
    assert [len(o.token_ids) for o in outs] == [8, 8, 8]
    # bf16 kernels round differently: compare with the reference's own scale
    for out in outs:
        ref = no_cache_logits(model, out.prompt_token_ids + out.token_ids).cpu()
        start = len(out.prompt_token_ids) - 1
        assert (out.logits - ref[start : start + 8]).abs().max().item() <= 0.05 * ref.abs().max().item()
