"""engine/worker/packed_linear.py: packed copies stand in for a CPU float32 model's linears only inside
`small(rows)`: for few rows always, for many where the kernel has MKL's bits (or with fast_prefill); and agree
with the stock path to float32 rounding."""

from __future__ import annotations

import torch

from engine.models.random_models import random_model
from engine.worker import packed_linear
from engine.worker.kernels import panel_linear
from engine.worker.packed_linear import PackedLinears


def tiny(dtype=torch.float32):
    return random_model("llama:tiny", dtype, torch.device("cpu"))[0]


def test_every_linear_is_packed_and_swapped_in_only_inside_small(monkeypatch):
    # the rule on an Intel CPU (MKL's own kernels): 2-16 rows, and MKL sums otherwise than the kernel
    monkeypatch.setattr(packed_linear, "MIN_ROWS", 2)
    monkeypatch.setattr(packed_linear, "MAX_ROWS", 16)
    monkeypatch.setattr(panel_linear, "matches_stock", lambda *args: False)
    model = tiny()
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    packed = PackedLinears(model)
    assert [m for m, _ in packed.entries] == linears
    # one copy: the kernel's panels, or oneDNN's packed weights where the kernel cannot be built
    assert packed.nbytes == sum(m.weight.numel() * 4 for m in linears)
    with packed.small(8):
        assert all("forward" in m.__dict__ for m in linears)
    assert not any("forward" in m.__dict__ for m in linears)
    # prefill-sized forwards and one row keep the stock path
    with packed.small(17):
        assert not any("forward" in m.__dict__ for m in linears)
    with packed.small(1):
        assert not any("forward" in m.__dict__ for m in linears)
    # elsewhere (MKL's generic path): one row too, and prefill with fast_prefill only
    monkeypatch.setattr(packed_linear, "MIN_ROWS", 1)
    with packed.small(1):
        assert all("forward" in m.__dict__ for m in linears)
    with packed.small(17):
        assert not any("forward" in m.__dict__ for m in linears)
    monkeypatch.setattr(packed_linear, "MKL_FAST", False)
    packed = PackedLinears(model, fast_prefill=True)
    for rows in (17, 4096):
        with packed.small(rows):
            assert all("forward" in m.__dict__ for m in linears)
    packed.enabled = False
    with packed.small(1):
        assert not any("forward" in m.__dict__ for m in linears)


def test_prefill_goes_through_the_kernel_where_it_has_mkls_bits(monkeypatch):
    monkeypatch.setattr(panel_linear, "matches_stock", lambda *args: True)
    model = tiny()
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    packed = PackedLinears(model)
    assert packed.exact_prefill
    with packed.small(4096):
        assert all("forward" in m.__dict__ for m in linears)
    # no copy for oneDNN: the kernel serves every row count
    assert packed.nbytes == sum(m.weight.numel() * 4 for m in linears)
    # a layer without MKL's bits takes the stock linear for prefill, through the same swapped forward
    first = linears[0]
    monkeypatch.setattr(
        panel_linear, "matches_stock", lambda weight, *args: weight.data_ptr() != first.weight.data_ptr()
    )
    packed = PackedLinears(model)
    assert not packed.exact_prefill and packed.any_exact
    x = torch.randn(1, 40, first.in_features)
    with torch.inference_mode(), packed.small(40):
        assert torch.equal(first(x), torch.nn.functional.linear(x, first.weight))


@torch.inference_mode()
def test_packed_outputs_agree_with_the_stock_linear_for_any_row_count(monkeypatch):
    monkeypatch.setattr(packed_linear, "MIN_ROWS", 1)
    monkeypatch.setattr(packed_linear, "MKL_FAST", False)
    model = tiny()
    # 1-16 rows through the C kernel, more through oneDNN's packed weights
    packed = PackedLinears(model, fast_prefill=True)
    layer = next(m for m in model.modules() if type(m) is torch.nn.Linear)
    for rows in [*range(1, 17), 64, 300]:
        x = torch.randn(1, rows, layer.in_features)
        stock = layer(x)
        with packed.small(rows):
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
    with packed.small(6):
        ours = model(ids).logits
    torch.testing.assert_close(ours, stock, rtol=1e-5, atol=1e-5)
    # bf16 weights: no packed copy (the stock path is what the engine measured against)
    assert PackedLinears(tiny(torch.bfloat16)).entries == []


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
    with packed.small(8):
        ours = layer(x)
    torch.testing.assert_close(ours, torch.nn.functional.linear(x, layer.weight), rtol=1e-5, atol=1e-5)
    layer.weight = torch.nn.Parameter(torch.randn_like(layer.weight))
    with packed.small(8):
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
    with packed.small(8):
        ours = layer(x)
    torch.testing.assert_close(
        ours, torch.nn.functional.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5
    )


def test_fast_prefill_is_an_engine_option_taken_only_where_mkl_is_slow():
    from engine.engine import Engine, EngineConfig, SamplingParams
    from tests.helpers.reference import no_cache_logits
    from tests.helpers.tiny_models import random_prompts, tiny_model

    model = tiny_model("llama-gqa")
    assert Engine.from_model(model).runner.linears.fast_prefill is False
    engine = Engine.from_model(model, config=EngineConfig(fast_prefill=True, max_batched_tokens=64))
    assert engine.runner.linears.fast_prefill is (not packed_linear.MKL_FAST)
    # a tiny model's logits stay within the tolerance either way
    (out,) = engine.generate(random_prompts([40]), SamplingParams(max_tokens=4, return_logits=True))
    ref = no_cache_logits(model, out.prompt_token_ids + out.token_ids)[39:43]
    assert (out.logits - ref).abs().max().item() <= 1e-4


def test_where_the_probe_passes_the_engines_prefill_is_mkls_to_the_bit():
    """Every prompt position's log-probability through the kernel equals, bit for bit, the same engine's with
    every linear stock (MKL): the kernel changes the speed of prefill, not one bit of its answer. (The logits of
    the last position alone differ: the stock head multiplies 1-3 rows by MKL's small-row path, which sums
    otherwise, where the kernel sums as transformers' forward of the whole prompt does.)"""
    import pytest

    from engine.engine import Engine, SamplingParams
    from tests.helpers.tiny_models import random_prompts, tiny_model
    from tests.helpers.torch_threads import torch_threads

    model = tiny_model("llama-gqa")
    fast = Engine.from_model(model)
    if not fast.runner.linears.exact_prefill:
        pytest.skip("the kernel does not give this machine's MKL bits (prefill stays stock here)")
    stock = Engine.from_model(model)
    stock.runner.linears.enabled = False
    prompts = random_prompts([40, 100])
    params = SamplingParams(max_tokens=1, prompt_logprobs=True)
    with torch_threads(2):
        pairs = list(zip(fast.generate(prompts, params), stock.generate(prompts, params)))
    for ours, theirs in pairs:
        assert ours.prompt_logprobs == theirs.prompt_logprobs
        assert len(ours.prompt_logprobs) == len(ours.prompt_token_ids)
