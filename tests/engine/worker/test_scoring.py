"""Prompt log-probabilities through every cache path equal transformers' own no-cache forward (engine/worker/scoring.py).

Each test runs on the CPU and, where torch sees one, on a CUDA GPU (tests/gpu/run.sh runs this file there).
"""

import pytest
import torch
import transformers

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.models.loading import stock_attention
from tests.helpers.reference import no_cache_logits
from tests.helpers.tiny_models import random_prompts, tiny_model

TOL = 1e-4
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")),
]
SCORED = SamplingParams(max_tokens=3, prompt_logprobs=True)


def expected_logprobs(logits: torch.Tensor, tokens: list[int]) -> torch.Tensor:
    """[len - 1] log-probability of tokens 1.. from the logits of every position."""
    logprobs = torch.log_softmax(logits.float().cpu(), dim=-1)
    return logprobs[:-1].gather(1, torch.tensor(tokens[1:])[:, None])[:, 0]


def max_diff(engine, request_id, logits) -> float:
    """Largest |ours - reference| over every prompt token after the first."""
    tokens = engine.requests[request_id].prompt_token_ids
    ours = engine.prompt_logprobs(request_id)
    assert ours[0] is None and len(ours) == len(tokens), (len(ours), len(tokens))
    if len(tokens) == 1:
        return 0.0
    return (torch.tensor(ours[1:]) - expected_logprobs(logits[: len(tokens)], tokens)).abs().max().item()


def assert_exact(engine, model, request_id, logits=None):
    tokens = engine.requests[request_id].prompt_token_ids
    logits = no_cache_logits(model, tokens) if logits is None else logits
    diff = max_diff(engine, request_id, logits)
    assert diff <= TOL, f"{request_id}: max |logprob diff| {diff}"
    return diff


def run(engine):
    while engine.has_unfinished():
        engine.step()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arch", ["llama-gqa", "qwen3-gqa", "llama-mqa"])
def test_paged_and_chunked_scoring_is_exact(arch, device):
    """Whole prompts in one chunk, and prompts cut into chunks that cross block boundaries, batched with
    requests that are not scored (their rows stay one per chunk)."""
    model = tiny_model(arch).to(device)
    for budget in (512, 7):
        engine = Engine.from_model(
            model, config=EngineConfig(block_size=4, num_blocks=96, max_batched_tokens=budget)
        )
        prompts = random_prompts([2, 17, 30, 9, 1], seed=budget)
        ids = [
            engine.submit(p, SCORED if i % 2 == 0 else SamplingParams(max_tokens=3))
            for i, p in enumerate(prompts)
        ]
        run(engine)
        for i in ids[::2]:
            assert_exact(engine, model, i)


@pytest.mark.parametrize("device", DEVICES)
def test_score_returns_every_token_and_the_perplexity(device):
    model = tiny_model("llama-gqa").to(device)
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=64, max_batched_tokens=8))
    tokens = random_prompts([25], seed=3)[0]
    score = engine.score(tokens)
    assert score.token_ids == tokens and len(score.logprobs) == 25 and score.logprobs[0] is None
    expected = expected_logprobs(no_cache_logits(model, tokens), tokens)
    assert abs(score.nll - float(-expected.sum())) <= 25 * TOL
    assert score.perplexity == pytest.approx(float(torch.exp(-expected.mean())), rel=1e-4)
    with pytest.raises(ValueError, match="prompt_logprobs"):
        engine.prompt_logprobs(engine.submit([1, 2, 3], SamplingParams(max_tokens=1)))


def test_request_outputs_carry_prompt_logprobs_as_vllm_does():
    """RequestOutput.prompt_logprobs: None first, then one per prompt token, exact; None when not asked for."""
    model = tiny_model("llama-gqa")
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=64, max_batched_tokens=8))
    prompts = random_prompts([13, 6], seed=5)
    scored, plain = engine.generate(prompts, [SCORED, SamplingParams(max_tokens=3)])
    assert scored.prompt_logprobs[0] is None and len(scored.prompt_logprobs) == 13
    expected = expected_logprobs(no_cache_logits(model, prompts[0]), prompts[0])
    assert (torch.tensor(scored.prompt_logprobs[1:]) - expected).abs().max().item() <= TOL
    assert plain.prompt_logprobs is None


@pytest.mark.parametrize("device", DEVICES)
def test_prefix_hits_score_the_reused_span_without_writing_the_cache(device):
    """The second request reuses 36 cached tokens (whole blocks and a partial one): their log-probabilities are
    computed by a probe that reads the cached blocks; the pool is bit-identical before and after."""
    model = tiny_model("llama-gqa").to(device)
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=128, max_batched_tokens=9))
    shared = random_prompts([38], seed=4)[0]
    first = engine.submit(shared, SCORED)
    run(engine)
    pool_before = engine.kv.kv.clone()
    rid = engine.submit(shared + random_prompts([11], seed=5)[0], SCORED)
    engine.step()
    req = engine.requests[rid]
    assert req.num_cached >= 36
    size = engine.config.block_size
    reused = req.block_table[: req.num_cached // size]
    run(engine)
    assert_exact(engine, model, first)
    assert_exact(engine, model, rid)
    # the reused blocks were read, never written
    for block in reused:
        slots = slice(block * size, (block + 1) * size)
        assert torch.equal(engine.kv.kv[:, :, :, slots], pool_before[:, :, :, slots])


@pytest.mark.parametrize("device", DEVICES)
def test_edits_forks_and_preemption_keep_scores_exact(device):
    model = tiny_model("qwen3-gqa").to(device)
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=128, max_batched_tokens=9))
    rid = engine.submit(random_prompts([30], seed=6)[0], SamplingParams(max_tokens=8, prompt_logprobs=True))
    run(engine)
    # an edit in the prompt of a finished request: the log-probabilities from the edit point on are new
    engine.edit(rid, 13, [11, 12], kind="insert")
    run(engine)
    assert_exact(engine, model, rid)
    # an edit one token after a block boundary of a running request
    rid2 = engine.submit(random_prompts([21], seed=7)[0], SamplingParams(max_tokens=8, prompt_logprobs=True))
    engine.step()
    engine.edit(rid2, 9, [5], kind="replace")
    run(engine)
    assert_exact(engine, model, rid2)
    # parallel samples: the siblings share the prompt's scores
    outs = engine.generate(
        [random_prompts([19], seed=8)[0]], SamplingParams(max_tokens=4, n=3, prompt_logprobs=True)
    )
    for child in engine.requests[outs[0].request_id].children:
        assert_exact(engine, model, child)
    # a pool too small for all at once: decodes preempt, readmissions recompute
    small = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=14, max_batched_tokens=64))
    events = []
    small.trace.listeners.append(events.append)
    ids = [
        small.submit(p, SamplingParams(max_tokens=14, prompt_logprobs=True))
        for p in random_prompts([10, 11, 9, 12], seed=2)
    ]
    run(small)
    assert any(e["type"] == "request_preempted" for e in events)
    for i in ids:
        assert_exact(small, model, i)


def hybrid_window_model(device):
    """Gemma 3 style: window layers (W=6, rings) and full layers (paged)."""
    config = transformers.Gemma3TextConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=96,
        max_position_embeddings=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=6,
        layer_types=["sliding_attention", "full_attention"] * 2,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval().to(device)
    model.generation_config.eos_token_id = None
    return model


@pytest.mark.parametrize("device", DEVICES)
def test_ring_layers_score_exactly_through_chunks_and_snapshot_restarts(device):
    model = hybrid_window_model(device)
    engine = Engine.from_model(model, config=EngineConfig(block_size=4, num_blocks=128, max_batched_tokens=5))
    events = []
    engine.trace.listeners.append(events.append)
    shared = random_prompts([43], seed=5)[0]
    first = engine.submit(shared, SCORED)
    run(engine)
    assert_exact(engine, model, first)
    # a prefix hit: window layers restart from a ring snapshot, the span before it is scored by a probe
    second = engine.submit(shared[:41] + [9, 9, 9], SCORED)
    run(engine)
    resume = [e for e in events if e["type"] == "ring_resume"][-1]
    assert resume["source"] == "snapshot" and engine.requests[second].num_cached == resume["position"] > 0
    assert_exact(engine, model, second)
    # the probe's ring row went back
    assert engine.cache.rings.bytes_in_use() == 0


def sink_mask(length: int, sinks: int, window: int) -> torch.Tensor:
    q, k = torch.arange(length)[:, None], torch.arange(length)[None, :]
    return ((k <= q) & ((k > q - window) | (k < sinks)))[None, None]


@pytest.mark.parametrize("device", DEVICES)
def test_sinks_score_exactly_against_their_own_mask(device):
    """EngineConfig(window=W, sink_tokens=S): every layer keeps S sinks + W recent; the reference is
    transformers' forward with that mask (sinks change the answer on purpose)."""
    model = tiny_model("llama-gqa").to(device)
    sinks, window = 2, 6
    config = EngineConfig(block_size=4, num_blocks=64, max_batched_tokens=5, sink_tokens=sinks, window=window)
    engine = Engine.from_model(model, config=config)
    tokens = random_prompts([40], seed=9)[0]
    score = engine.score(tokens)
    with stock_attention(model), torch.inference_mode():
        mask = sink_mask(len(tokens), sinks, window).to(device)
        logits = model(torch.tensor([tokens], device=device), attention_mask=mask, use_cache=False).logits[0]
    rid = next(iter(engine.requests))
    assert_exact(engine, model, rid, logits)
    # and the sinks did change the answer
    assert (
        torch.tensor(score.logprobs[1:]) - expected_logprobs(no_cache_logits(model, tokens), tokens)
    ).abs().max() > 1e-3
