"""engine/worker/packed_linear.py: the C kernel's packed copies stand in for a CPU float32 model's linears only
inside `swapped_in()`: for few rows always, for many where the kernel has MKL's bits; and agree with the stock
path to float32 rounding."""

from __future__ import annotations

import torch

from engine.models.random_models import random_model
from engine.worker import packed_linear
from engine.worker.kernels import panel_linear
from engine.worker.packed_linear import PackedLinears


def tiny(dtype=torch.float32):
    return random_model("llama:tiny", dtype, torch.device("cpu"))[0]


def panel_bytes(linears) -> int:
    # panels of the kernel's vector width, the last padded with zeros
    width = panel_linear.lanes()
    return sum(-(-m.out_features // width) * width * m.in_features * 4 for m in linears)


def test_every_linear_is_packed_and_swapped_in_only_inside_a_forward(monkeypatch):
    monkeypatch.setattr(panel_linear, "matches_stock", lambda *args: False)
    model = tiny()
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    packed = PackedLinears(model)
    assert [m for m, _ in packed.entries] == linears
    assert packed.nbytes == panel_bytes(linears)
    with packed.swapped_in():
        assert all("forward" in m.__dict__ for m in linears)
    assert not any("forward" in m.__dict__ for m in linears)


def test_prefill_goes_through_the_kernel_where_it_has_mkls_bits(monkeypatch):
    monkeypatch.setattr(panel_linear, "matches_stock", lambda *args: True)
    model = tiny()
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    packed = PackedLinears(model)
    assert packed.exact_prefill and packed.exact_count == len(linears)
    # a layer without MKL's bits takes the stock linear for prefill, the kernel for few rows
    first = linears[0]
    monkeypatch.setattr(
        panel_linear, "matches_stock", lambda weight, *args: weight.data_ptr() != first.weight.data_ptr()
    )
    packed = PackedLinears(model)
    assert not packed.exact_prefill and packed.exact_count == len(linears) - 1
    kernel = panel_linear.product(panel_linear.pack(first.weight.detach()), first.out_features, None)
    with torch.inference_mode(), packed.swapped_in():
        x = torch.randn(1, 40, first.in_features)
        assert torch.equal(first(x), torch.nn.functional.linear(x, first.weight))
        x = torch.randn(1, packed_linear.MAX_ROWS, first.in_features)
        assert torch.equal(first(x), kernel(x))


@torch.inference_mode()
def test_packed_outputs_agree_with_the_stock_linear_for_any_row_count():
    model = tiny()
    packed = PackedLinears(model)
    layer = next(m for m in model.modules() if type(m) is torch.nn.Linear)
    for rows in [*range(1, 17), 64, 300]:
        x = torch.randn(1, rows, layer.in_features)
        stock = layer(x)
        with packed.swapped_in():
            ours = layer(x)
        assert ours.shape == stock.shape
        torch.testing.assert_close(ours, stock, rtol=1e-5, atol=1e-5)
        assert not torch.equal(ours, torch.zeros_like(ours))


@torch.inference_mode()
def test_the_model_forward_agrees_and_other_dtypes_are_left_alone():
    model = tiny()
    ids = torch.randint(0, model.config.vocab_size, (1, 6))
    stock = model(ids).logits
    packed = PackedLinears(model)
    with packed.swapped_in():
        ours = model(ids).logits
    torch.testing.assert_close(ours, stock, rtol=1e-5, atol=1e-5)
    # bf16 weights: no packed copy (the plan keeps the stock linears and says why)
    assert packed_linear.why_not(model) == ""
    assert "float32" in packed_linear.why_not(tiny(torch.bfloat16))


@torch.no_grad()
def test_weights_changed_after_packing_are_packed_again():
    """load_state_dict (in place) and a new Parameter: the packed path answers with the model as it is now."""
    model = tiny()
    packed = PackedLinears(model)
    other = random_model("llama:tiny", torch.float32, torch.device("cpu"))[0]
    torch.manual_seed(1)
    for p in other.parameters():
        p.normal_()
    model.load_state_dict(other.state_dict())
    layer = next(m for m in model.modules() if type(m) is torch.nn.Linear)
    x = torch.randn(1, 8, layer.in_features)
    with packed.swapped_in():
        ours = layer(x)
    torch.testing.assert_close(ours, torch.nn.functional.linear(x, layer.weight), rtol=1e-5, atol=1e-5)
    layer.weight = torch.nn.Parameter(torch.randn_like(layer.weight))
    with packed.swapped_in():
        ours = layer(x)
    torch.testing.assert_close(ours, torch.nn.functional.linear(x, layer.weight), rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_a_bias_changed_in_place_after_packing_is_packed_again():
    """A strided bias is copied for the kernel: changed in place, its version says the copy is stale."""
    layer = torch.nn.Linear(24, 40)
    layer.bias = torch.nn.Parameter(torch.randn(80)[::2])
    packed = PackedLinears(torch.nn.Sequential(layer))
    x = torch.randn(1, 8, 24)
    layer.bias.add_(1.0)
    with packed.swapped_in():
        ours = layer(x)
    torch.testing.assert_close(
        ours, torch.nn.functional.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5
    )


def test_without_the_kernel_the_plan_keeps_the_stock_linears_and_says_why(monkeypatch):
    from engine.engine import Engine
    from engine.worker.run_plan import STOCK
    from tests.helpers.tiny_models import tiny_model

    monkeypatch.setattr(panel_linear, "available", lambda: False)
    runner = Engine.from_model(tiny_model("llama-gqa")).runner
    assert runner.linears is None and runner.plan.linears == STOCK
    assert "no panel_linear kernel" in dict(runner.plan.why)["linears"]


def test_where_the_probe_passes_the_engines_prefill_is_mkls_to_the_bit():
    """Every prompt position's log-probability through the kernel equals, bit for bit, the same engine's with
    every linear stock (MKL): the kernel changes the speed of prefill, not one bit of its answer. (The logits of
    the last position alone differ: the stock head multiplies 1-3 rows by MKL's small-row path, which sums
    otherwise, where the kernel sums as transformers' forward of the whole prompt does.)"""
    from dataclasses import replace

    import pytest

    from engine.engine import Engine, SamplingParams
    from engine.worker.run_plan import STOCK
    from tests.helpers.decode_paths import engine_with_plan
    from tests.helpers.tiny_models import random_prompts, tiny_model
    from tests.helpers.torch_threads import torch_threads

    model = tiny_model("llama-gqa")
    fast = Engine.from_model(model)
    if fast.runner.linears is None or not fast.runner.linears.exact_prefill:
        pytest.skip("the kernel does not give this machine's MKL bits (prefill stays stock here)")
    stock = engine_with_plan(model, replace(fast.runner.plan, linears=STOCK))
    assert stock.runner.linears is None
    prompts = random_prompts([40, 100])
    params = SamplingParams(max_tokens=1, prompt_logprobs=True)
    with torch_threads(2):
        pairs = list(zip(fast.generate(prompts, params), stock.generate(prompts, params)))
    for ours, theirs in pairs:
        assert ours.prompt_logprobs == theirs.prompt_logprobs
        assert len(ours.prompt_logprobs) == len(ours.prompt_token_ids)
