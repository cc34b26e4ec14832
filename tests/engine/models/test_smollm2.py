"""The embedded model (SmolLM2-135M-Instruct, GQA 9:3) through our paged cache: exact against transformers."""

from dataclasses import asdict, replace

import pytest
import torch

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.worker.run_plan import MODULES
from tests.helpers.decode_paths import engine_with_plan
from tests.helpers.reference import greedy_generate, no_cache_logits

pytestmark = pytest.mark.smollm2

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about memory.",
    "Explain a KV cache in one line.",
    "List three prime numbers.",
    "Who wrote Hamlet?",
    "What is 12 times 12?",
    "Name a blue fruit.",
    "Say hello in Spanish.",
]


@pytest.fixture(scope="module")
def engine():
    return Engine.load(
        "smollm2", EngineConfig(device="cpu", block_size=16, num_blocks=96, max_batched_tokens=24)
    )


def chat(engine, question):
    return engine.encode([{"role": "user", "content": question}])


def test_shape_is_gqa_with_three_kv_heads(engine):
    shape = engine.shape
    assert (shape.layers, shape.q_heads, shape.kv_heads, shape.head_dim) == (30, 9, 3, 64)
    assert engine.kv.nbytes == 2 * 30 * 3 * 64 * 4 * 16 * 96


def test_chunked_prefill_and_decode_logits_equal_no_cache_forward(engine):
    # max_batched_tokens=24 splits each ~35-token chat prompt into chunks crossing block boundaries
    prompts = [chat(engine, q) for q in QUESTIONS[:3]]
    outputs = engine.generate(prompts, SamplingParams(max_tokens=6, return_logits=True))
    for out in outputs:
        ref = no_cache_logits(engine.model, out.prompt_token_ids + out.token_ids)
        start = len(out.prompt_token_ids) - 1
        diff = (out.logits - ref[start : start + len(out.token_ids)]).abs().max().item()
        assert diff <= 1e-4, diff


def test_greedy_tokens_equal_generate_alone_and_batched_eight(engine):
    prompts = [chat(engine, q) for q in QUESTIONS]
    expected = [greedy_generate(engine.model, p, 10) for p in prompts]
    batched = engine.generate(prompts, SamplingParams(max_tokens=10))
    assert [o.token_ids for o in batched] == expected
    alone = engine.generate([prompts[0]], SamplingParams(max_tokens=10))[0]
    assert alone.token_ids == expected[0]
    assert "Paris" in alone.text


@pytest.mark.parametrize("count", [12])
def test_many_decodes_at_once_keep_the_no_cache_logits(count):
    """8 and 12 sequences of 30-200 tokens decoding together: every linear of a decode step through the few-row
    path (engine/worker/packed_linear.py; 12 rows in two passes of the C kernel where it is built) and
    attention in place. A real model's logits are large (20-30), so this is where rounding shows: the kernel's
    blocked sums moved them 6.7e-5 here, the stock path 6.1e-5."""
    engine = Engine.load("smollm2", EngineConfig(device="cpu", block_size=16, max_batched_tokens=256))
    generator = torch.Generator().manual_seed(3)
    lengths = [30, 64, 100, 150, 200, 31, 77, 129, 45, 90, 160, 33][:count]
    prompts = [torch.randint(100, 40000, (n,), generator=generator).tolist() for n in lengths]
    outputs = engine.generate(prompts, SamplingParams(max_tokens=8, return_logits=True))
    for out in outputs:
        ref = no_cache_logits(engine.model, out.prompt_token_ids + out.token_ids)
        start = len(out.prompt_token_ids) - 1
        expected = ref[start : start + len(out.token_ids)]
        diff = (out.logits - expected).abs().max().item()
        assert diff <= 1e-4, f"{out.request_id}: max abs logit diff {diff}"
        assert expected.argmax(-1).tolist() == out.token_ids


def test_an_unchunked_prefill_is_transformers_forward_to_the_bit():
    """Prompts prefilled whole, three in one forward: each prompt's next-token logits equal transformers' own
    no-cache forward bit for bit, where the linear kernel has this machine's MKL bits (the engine's head
    multiplies one row per prompt, yet sums as MKL does for the reference's many rows; MKL's own path for
    1-3 rows sums otherwise and moved them 3.6e-5). Chunked prefill reads its cached prefix apart and merges
    by log-sum-exp: within rounding, not to the bit."""
    engine = Engine.load("smollm2", EngineConfig(device="cpu", block_size=16, max_batched_tokens=2048))
    linears = engine.runner.linears
    if linears is None or not linears.exact_prefill:
        pytest.skip("the linear kernel does not give this machine's MKL bits (prefill stays stock here)")
    from tests.helpers.torch_threads import torch_threads

    generator = torch.Generator().manual_seed(5)
    prompts = [torch.randint(100, 40000, (n,), generator=generator).tolist() for n in (40, 130, 300)]
    # two threads: each of MKL's shares of the reference's 40 rows is 4 or more on any runner
    with torch_threads(2):
        outputs = engine.generate(prompts, SamplingParams(max_tokens=1, return_logits=True))
        references = [no_cache_logits(engine.model, out.prompt_token_ids)[-1] for out in outputs]
    for out, reference in zip(outputs, references):
        assert torch.equal(out.logits[0], reference)


def test_fused_steps_give_the_modules_logits_to_the_bit(engine):
    """Eight chats decoding together through the fused step (engine/worker/fused_forward.py: norms, rotary and
    K/V writes in C, no module calls) and through transformers' modules: the same logits, bit for bit."""
    if engine.runner.fused is None:
        pytest.skip(f"no fused steps here: {engine.runner.plan.describe()}")
    prompts = [chat(engine, q) for q in QUESTIONS]
    params = SamplingParams(max_tokens=6, return_logits=True)
    # fresh engines: the fixture's cache holds these prompts from other tests (prefix hits prefill otherwise)
    fused = Engine.from_model(engine.model, config=engine.config).generate(prompts, params)
    plan = replace(engine.runner.plan, step=MODULES)
    modules = engine_with_plan(engine.model, plan, **asdict(engine.config))
    for a, b in zip(fused, modules.generate(prompts, params)):
        assert a.token_ids == b.token_ids
        assert torch.equal(a.logits, b.logits), (a.logits - b.logits).abs().max().item()
