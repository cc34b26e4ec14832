"""The fused steps (engine/worker/fused_forward.py) and their C operations (engine/worker/kernels/decode_ops.c):
the same bits as transformers' modules, and taken only where they fit."""

from dataclasses import replace

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm, apply_rotary_pos_emb

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.worker import fused_fit
from engine.worker.fused_fit import intercepted
from engine.worker.kernels import decode_ops
from engine.worker.run_plan import FUSED, MODULES
from tests.helpers.decode_paths import assert_outputs_match_no_cache, engine_with_plan
from tests.helpers.tiny_models import random_prompts, tiny_model
from tests.helpers.torch_threads import torch_threads

pytestmark = pytest.mark.skipif(
    not decode_ops.available(), reason=f"no decode_ops kernel: {decode_ops.why_not()}"
)


@pytest.mark.parametrize("width", [8, 64, 100, 576, 640, 1000, 2048, 5120])
@pytest.mark.parametrize("rows", [1, 3, 8, 100])
def test_add_rms_norm_is_llamas_rmsnorm_of_the_sum_to_the_bit(width, rows):
    # widths below and above torch's cascade step (16 x 4 vectors of 8), with a scalar tail (100, 1000)
    generator = torch.Generator().manual_seed(width * 31 + rows)
    norm = LlamaRMSNorm(width, eps=1e-5)
    norm.weight.data = torch.randn(width, generator=generator)
    h = torch.randn(rows, width, generator=generator) * 3
    delta = torch.randn(rows, width, generator=generator)
    # 64 rows or more are shared among threads
    with torch.inference_mode(), torch_threads(2):
        expected_sum = h + delta
        expected = norm(expected_sum)
        out = decode_ops.add_rms_norm(h, delta, norm.weight.detach(), 1e-5, torch.empty_like(h))
    assert torch.equal(h, expected_sum)
    assert torch.equal(out, expected)


def test_add_rms_norm_refuses_rows_narrower_than_torchs_vectors():
    h = torch.randn(2, 4)
    with pytest.raises(ValueError, match="narrower"):
        decode_ops.add_rms_norm(h, None, torch.ones(4), 1e-5, torch.empty_like(h))


def test_rope_write_is_transformers_rotary_then_the_pool_writes():
    generator = torch.Generator().manual_seed(0)
    n, heads, kv_heads, dim, slots = 5, 9, 3, 64, 40
    q, k, v = (torch.randn(n, h, dim, generator=generator) for h in (heads, kv_heads, kv_heads))
    cos, sin = torch.randn(n, dim, generator=generator), torch.randn(n, dim, generator=generator)
    keys, values = torch.zeros(kv_heads, slots, dim), torch.zeros(kv_heads, slots, dim)
    where = torch.tensor([7, 0, 39, 12, 13])
    rotated = decode_ops.rope_write(q, k, v, cos, sin, keys, values, where, torch.empty_like(q))
    # transformers' layout: [1, heads, N, D] and cos / sin [1, N, D]
    q_ref, k_ref = apply_rotary_pos_emb(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos[None], sin[None]
    )
    assert torch.equal(rotated, q_ref[0].transpose(0, 1))
    assert torch.equal(keys[:, where], k_ref[0])
    assert torch.equal(values[:, where], v.transpose(0, 1))
    untouched = torch.ones(slots, dtype=torch.bool)
    untouched[where] = False
    assert not keys[:, untouched].any() and not values[:, untouched].any()


@pytest.mark.parametrize("rows", [3, 130])
def test_rope_is_transformers_rotary_of_prefill_rows(rows):
    # 64 rows or more are shared among threads
    generator = torch.Generator().manual_seed(rows)
    q, k = torch.randn(rows, 9, 64, generator=generator), torch.randn(rows, 3, 64, generator=generator)
    cos, sin = torch.randn(rows, 64, generator=generator), torch.randn(rows, 64, generator=generator)
    with torch_threads(2):
        q_ours, k_ours = decode_ops.rope(q, k, cos, sin)
    q_ref, k_ref = apply_rotary_pos_emb(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos[None], sin[None]
    )
    assert torch.equal(q_ours, q_ref[0].transpose(0, 1))
    assert torch.equal(k_ours, k_ref[0].transpose(0, 1))


def test_rope_write_takes_strided_slots_and_refuses_rotating_in_place():
    generator = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(2, 2, 8, generator=generator), torch.randn(2, 1, 8), torch.randn(2, 1, 8)
    cos, sin = torch.randn(2, 8, generator=generator), torch.randn(2, 8, generator=generator)
    keys, values = torch.zeros(1, 20, 8), torch.zeros(1, 20, 8)
    # every other element of [3, 0, 17, 0]: a copy is made, and must live through the call
    slots = torch.tensor([3, 0, 17, 0])[::2]
    decode_ops.rope_write(q, k, v, cos, sin, keys, values, slots, torch.empty_like(q))
    assert torch.equal(values[0, [3, 17]], v[:, 0])
    with pytest.raises(ValueError, match="overlaps"):
        decode_ops.rope_write(q, k, v, cos, sin, keys, values, slots, q)


def test_rope_write_refuses_a_slot_outside_the_pool():
    q, k = torch.randn(1, 2, 8), torch.randn(1, 1, 8)
    keys = torch.zeros(1, 4, 8)
    with pytest.raises(ValueError, match="outside"):
        decode_ops.rope_write(
            q,
            k,
            k,
            torch.ones(1, 8),
            torch.ones(1, 8),
            keys,
            keys.clone(),
            torch.tensor([4]),
            torch.empty_like(q),
        )


def counted(engine: Engine) -> list[tuple[int, bool]]:
    """(rows, decodes only) of every step the fused path ran (a list the engine's fused forward appends to)."""
    steps, forward = [], engine.runner.fused.forward

    def counting(ids, positions, batch, keep=0, linears=None):
        steps.append((ids.shape[1], engine.runner.fused.decodes_only(batch)))
        return forward(ids, positions, batch, keep, linears)

    engine.runner.fused.forward = counting
    return steps


def fused_and_modules(model, **config) -> tuple[Engine, Engine]:
    """Two engines on `model`: its steps fused, and through its modules (the same attention and linears)."""
    fused = Engine.from_model(model, config=EngineConfig(**config))
    assert fused.runner.plan.step == FUSED, fused.runner.plan.describe()
    modules = engine_with_plan(model, replace(fused.runner.plan, step=MODULES), **config)
    assert modules.runner.plan.attention == fused.runner.plan.attention
    assert modules.runner.plan.linears == fused.runner.plan.linears
    return fused, modules


def assert_same_logits(ours, theirs) -> None:
    for a, b in zip(ours, theirs, strict=True):
        assert a.token_ids == b.token_ids
        assert torch.equal(a.logits, b.logits), (a.logits - b.logits).abs().max().item()


@pytest.mark.parametrize("arch", ["llama-mha", "llama-gqa", "llama-mqa", "qwen2-gqa", "mistral-mqa"])
def test_fused_steps_give_the_modules_logits_to_the_bit(arch, monkeypatch):
    model = tiny_model(arch)
    # unequal lengths, a shared prefix (a prefix hit), small steps: prefill chunks, mixed and decode-only steps
    prompts = random_prompts([24, 24, 37, 19, 50], seed=3)
    prompts.append(prompts[0][:20] + random_prompts([9], seed=4)[0])
    params = SamplingParams(max_tokens=10, return_logits=True)
    fused, modules = fused_and_modules(model, block_size=8, max_batched_tokens=48)
    assert fused.runner.fused is not None
    steps = counted(fused)

    def modules_forward(*args, **kwargs):
        raise AssertionError("a step of the fused engine ran the modules")

    # every step fused: the model's own forward must not run
    # on the class: a forward set on the instance is itself a reason to run the modules
    with monkeypatch.context() as patched:
        patched.setattr(type(model), "forward", modules_forward)
        ours = fused.generate(prompts, params)
    # prefill chunks, mixed steps and decode-only steps of every request all took it
    assert (len(prompts), True) in steps
    assert any(not decodes for _, decodes in steps)
    assert_same_logits(ours, modules.generate(prompts, params))
    assert_outputs_match_no_cache(model, ours)


@pytest.mark.parametrize(
    "arch, overrides, why",
    [
        ("qwen3-gqa", {}, "Qwen3ForCausalLM"),
        ("phi3-mha", {}, "Phi3ForCausalLM"),
        ("mistral-mqa", {"sliding_window": 16}, "window"),
        # a window only the module passes (kvtui's config reading sees none): the modules then refuse it
        ("mistral-mqa", {"sliding_window": 16, "use_sliding_window": False}, "window"),
    ],
)
def test_models_the_fused_path_does_not_fit_run_the_modules(arch, overrides, why):
    engine = Engine.from_model(tiny_model(arch, **overrides))
    assert engine.runner.fused is None and engine.runner.plan.step == MODULES
    assert why in dict(engine.runner.plan.why)["step"]


def test_a_layer_with_more_than_a_llama_layer_runs_the_modules():
    model = tiny_model("llama-gqa")
    # as Qwen3's q_norm: a module the fused layer would skip
    model.model.layers[1].self_attn.q_norm = torch.nn.Identity()
    assert Engine.from_model(model).runner.fused is None
    assert "beyond a Llama layer" in fused_fit.why_not(model, (None,) * 3, 3)


def test_a_window_with_sinks_runs_the_modules():
    engine = Engine.from_model(tiny_model("llama-gqa"), config=EngineConfig(window=32, sink_tokens=4))
    assert engine.runner.fused is None


def test_a_norm_that_sums_otherwise_keeps_the_modules():
    # the load-time check, not the class name, decides: a norm computed another way must not be replaced
    model = tiny_model("llama-gqa")
    final = model.model.norm

    def float64_norm(hidden):
        variance = hidden.double().pow(2).mean(-1, keepdim=True)
        return final.weight * (hidden * torch.rsqrt(variance + final.variance_epsilon)).float()

    final.forward = float64_norm
    assert Engine.from_model(model).runner.fused is None
    del final.forward
    assert Engine.from_model(model).runner.fused is not None


def test_the_plan_is_described():
    model = tiny_model("llama-gqa")
    plan = Engine.from_model(model).runner.plan
    assert "step               fused: " in plan.describe()
    modules = engine_with_plan(model, replace(plan, step=MODULES)).runner
    assert modules.fused is None
    assert "step               modules: " in modules.plan.describe()


def test_a_norm_weight_replaced_after_load_is_the_one_used():
    model = tiny_model("llama-gqa")
    prompts = random_prompts([20, 33], seed=5)
    params = SamplingParams(max_tokens=6, return_logits=True)
    fused, modules = fused_and_modules(model)
    generator = torch.Generator().manual_seed(1)
    model.model.layers[1].post_attention_layernorm.weight = torch.nn.Parameter(
        torch.rand(64, generator=generator)
    )
    model.model.norm.weight.data.mul_(0.5)
    assert fused.runner.fused is not None
    assert_same_logits(fused.generate(prompts, params), modules.generate(prompts, params))


def test_a_hook_declared_to_the_runner_sends_the_step_through_the_modules():
    # an instrumented model (a hook on a module the fused path does not call) sees every step once the runner is
    # told; a global hook is seen without being told
    model = tiny_model("llama-gqa")
    prompts = random_prompts([20, 33], seed=6)
    params = SamplingParams(max_tokens=4, return_logits=True)
    fused, modules = fused_and_modules(model)
    mlp = model.model.layers[1].mlp
    calls = []

    def doubled(module, args, output):
        calls.append(1)
        return output * 2

    hook = mlp.register_forward_hook(doubled)
    with fused.runner.through_modules("a test hooks an MLP"):
        hooked = fused.generate(prompts, params)
    assert calls
    assert_same_logits(hooked, modules.generate(prompts, params))
    hook.remove()
    plain = fused.generate(prompts, params)
    assert not torch.equal(plain[0].logits, hooked[0].logits)
    # the fused step, not told: no module forward runs, so a hook is not called
    calls.clear()
    hook = mlp.register_forward_hook(doubled)
    try:
        fused.generate(prompts, params)
    finally:
        hook.remove()
    assert calls == [] and fused.runner._through_modules == []

    seen = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, output: seen.append(1))
    try:
        assert intercepted() == "a global forward hook"
        fused.generate(prompts, params)
        assert seen
    finally:
        handle.remove()
    assert intercepted() == ""


def test_a_model_that_runs_fewer_layers_than_it_holds():
    # transformers runs layers[:config.num_hidden_layers]; so must the fused path (and each layer its own K/V)
    model = tiny_model("llama-gqa")
    model.config.num_hidden_layers = 2
    prompts = random_prompts([20, 33], seed=7)
    params = SamplingParams(max_tokens=4, return_logits=True)
    fused, modules = fused_and_modules(model)
    assert fused.runner.fused is not None and len(fused.runner.fused.layers) == 2
    ours = fused.generate(prompts, params)
    assert_same_logits(ours, modules.generate(prompts, params))
    assert_outputs_match_no_cache(model, ours)


def test_scored_prompts_give_the_modules_log_probabilities_to_the_bit():
    # prompt_logprobs keeps every row of a scored chunk (a tensor logits_to_keep), the last of the others
    model = tiny_model("llama-gqa")
    prompts = random_prompts([40, 70, 25], seed=8)
    params = SamplingParams(max_tokens=3, prompt_logprobs=True, return_logits=True)
    fused, modules = fused_and_modules(model, max_batched_tokens=64)
    ours, theirs = fused.generate(prompts, params), modules.generate(prompts, params)
    assert_same_logits(ours, theirs)
    for a, b in zip(ours, theirs):
        assert a.prompt_logprobs[1:] and a.prompt_logprobs == b.prompt_logprobs
