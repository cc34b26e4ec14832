"""engine/worker/kernels/paged_decode.c: decode attention read in place through block tables, every sequence of a
group in one call: the attention of each sequence alone (gathered, float64), with windows, soft-capped scores,
head sizes that are not a multiple of the vector width, and one sequence split across the cores; through the
engine, the no-cache logits of transformers."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine.worker.attention as attention
from engine.engine import Engine, EngineConfig, SamplingParams
from engine.worker.kernels import paged_decode as kernel
from tests.helpers.decode_paths import assert_decodes_match_no_cache, assert_outputs_match_no_cache
from tests.helpers.tiny_models import random_prompts, tiny_model
from tests.helpers.torch_threads import torch_threads

pytestmark = pytest.mark.skipif(
    not kernel.available(), reason=f"no paged decode kernel here: {kernel.why_not()}"
)


def reference(q, keys, values, tables, lengths, block_size, scale, window=None, softcap=None):
    """Each sequence alone: its slots gathered, softmax in float64."""
    outs = []
    for i, (table, length) in enumerate(zip(tables.tolist(), lengths.tolist())):
        slots = torch.tensor([b * block_size + o for b in table for o in range(block_size)][:length])
        if window:
            slots = slots[-window:]
        k, v = keys[:, slots].double(), values[:, slots].double()
        scores = q[i].double() @ k.transpose(1, 2) * scale
        if softcap:
            scores = softcap * torch.tanh(scores / softcap)
        outs.append(torch.softmax(scores, -1) @ v)
    return torch.stack(outs).float()


def random_case(seed, n, hkv, groups, dim, block_size, lengths, blocks=200):
    generator = torch.Generator().manual_seed(seed)
    keys = torch.randn(hkv, blocks * block_size, dim, generator=generator)
    values = torch.randn(hkv, blocks * block_size, dim, generator=generator)
    q = torch.randn(n, hkv, groups, dim, generator=generator)
    width = max(-(-length // block_size) for length in lengths) + 2
    # each table a random choice of distinct blocks; rows padded past what the sequence needs
    tables = torch.stack([torch.randperm(blocks, generator=generator)[:width] for _ in range(n)])
    return q, keys, values, tables, torch.tensor(lengths)


@pytest.mark.parametrize(
    "n, hkv, groups, dim, block_size, lengths",
    [
        # SmolLM2's heads: 3 KV heads of 3 query heads, 64 wide
        (8, 3, 3, 64, 16, [525, 1, 17, 16, 300, 512, 33, 2]),
        # one sequence: split across the threads
        (1, 3, 3, 64, 16, [525]),
        # MQA, a head size that is no multiple of 16, blocks of 1 and of 32
        (3, 1, 8, 40, 1, [5, 90, 1]),
        (2, 2, 1, 24, 32, [700, 31]),
    ],
)
def test_kernel_is_the_attention_of_each_sequence_alone(n, hkv, groups, dim, block_size, lengths):
    q, keys, values, tables, lengths = random_case(0, n, hkv, groups, dim, block_size, lengths)
    scale = 1 / math.sqrt(dim)
    ours = kernel.paged_decode(q, keys, values, tables, lengths, block_size, scale)
    expected = reference(q, keys, values, tables, lengths, block_size, scale)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("window, softcap", [(100, None), (None, 5.0), (37, 30.0)])
def test_kernel_windows_and_soft_caps(window, softcap):
    q, keys, values, tables, lengths = random_case(1, 4, 2, 4, 64, 16, [525, 99, 37, 1])
    ours = kernel.paged_decode(q, keys, values, tables, lengths, 16, 0.2, window, softcap)
    expected = reference(q, keys, values, tables, lengths, 16, 0.2, window, softcap)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=2e-6)


def test_large_scores_do_not_overflow():
    # scores in the hundreds: the running max keeps every exponent <= 0
    q, keys, values, tables, lengths = random_case(2, 2, 1, 3, 64, 16, [400, 64])
    q = q * 30
    ours = kernel.paged_decode(q, keys, values, tables, lengths, 16, 0.125)
    assert torch.isfinite(ours).all()
    torch.testing.assert_close(
        ours, reference(q, keys, values, tables, lengths, 16, 0.125), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_answers_the_same_on_any_thread_count(threads):
    q, keys, values, tables, lengths = random_case(3, 2, 3, 3, 64, 16, [525, 200])
    with torch_threads(threads):
        ours = kernel.paged_decode(q, keys, values, tables, lengths, 16, 0.125)
    torch.testing.assert_close(
        ours, reference(q, keys, values, tables, lengths, 16, 0.125), rtol=1e-5, atol=2e-6
    )


@pytest.mark.parametrize("arch", ["llama-gqa", "qwen3-gqa", "llama-mqa"])
def test_engine_decodes_through_the_kernel_with_the_no_cache_logits(monkeypatch, arch):
    calls = []
    real = attention.paged_decode
    monkeypatch.setattr(attention, "paged_decode", lambda *a, **k: calls.append(1) or real(*a, **k))
    model = tiny_model(arch)
    engine = Engine.from_model(
        model, config=EngineConfig(block_size=4, num_blocks=200, max_batched_tokens=64)
    )
    assert_decodes_match_no_cache(model, engine)
    assert calls, "the kernel never ran"


def test_a_table_that_would_read_outside_the_pool_is_refused():
    q, keys, values, tables, lengths = random_case(4, 2, 1, 3, 64, 16, [40, 20], blocks=10)
    with pytest.raises(ValueError, match="length outside"):
        kernel.paged_decode(q, keys, values, tables, torch.tensor([40, 10_000]), 16, 0.1)
    with pytest.raises(ValueError, match="length outside"):
        kernel.paged_decode(q, keys, values, tables, torch.tensor([0, 20]), 16, 0.1)
    tables[1, 0] = 10
    with pytest.raises(ValueError, match="outside the pool's 10 blocks"):
        kernel.paged_decode(q, keys, values, tables, lengths, 16, 0.1)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    block_size=st.sampled_from([1, 2, 4, 16]),
    lengths=st.lists(st.integers(1, 70), min_size=1, max_size=6),
    shared=st.integers(0, 40),
    budget=st.sampled_from([5, 16, 64]),
    seed=st.integers(0, 2**16),
)
def test_random_workloads_through_the_kernel_keep_the_no_cache_logits(
    block_size, lengths, shared, budget, seed
):
    """Random block sizes, prompt lengths, a prefix shared by some prompts (prefix hits, copy-on-write of a
    partly filled block) and token budgets (chunking; decodes joining mid-prefill)."""
    model = shared_model()
    engine = Engine.from_model(
        model, config=EngineConfig(block_size=block_size, num_blocks=1200, max_batched_tokens=budget)
    )
    prefix = random_prompts([shared], seed=seed)[0] if shared else []
    prompts = [prefix + p if i % 2 else p for i, p in enumerate(random_prompts(lengths, seed=seed + 1))]
    assert_outputs_match_no_cache(
        model, engine.generate(prompts, SamplingParams(max_tokens=6, return_logits=True))
    )


_models = {}


def shared_model():
    # one model for every example (building it is most of an example's time)
    if "m" not in _models:
        _models["m"] = tiny_model("llama-gqa")
    return _models["m"]


def test_tensors_the_c_cannot_read_are_refused_before_it_runs():
    q, keys, values, tables, lengths = random_case(5, 2, 1, 3, 64, 16, [40, 20])
    with pytest.raises(ValueError, match="float32 CPU"):
        kernel.paged_decode(q.bfloat16(), keys, values, tables, lengths, 16, 0.1)
    with pytest.raises(ValueError, match="must be"):
        kernel.paged_decode(q, keys, values[:, :, :32].contiguous(), tables, lengths, 16, 0.1)
    with pytest.raises(ValueError, match="tables must be"):
        kernel.paged_decode(q, keys, values, tables[:1], lengths, 16, 0.1)
    # an empty group: nothing to read
    assert kernel.paged_decode(q[:0], keys, values, tables[:0], lengths[:0], 16, 0.1).shape == (0, 1, 3, 64)
