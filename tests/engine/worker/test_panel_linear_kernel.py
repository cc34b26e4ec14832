"""engine/worker/kernels/panel_linear.c: rows times a weight matrix through panels of one vector's outputs, summed
in the order it is given. Against float64 sums in that order it is exact (the order is what it claims); against MKL
it is bit for bit where the probe says so; for any row count, output counts that are no multiple of 16, with and
without a bias, on any thread count; and inside the engine's forward."""

from __future__ import annotations

import pytest
import torch

from engine.models.random_models import random_model
from engine.worker import packed_linear, path_probe
from engine.worker.kernels import panel_linear as kernel
from engine.worker.packed_linear import PackedLinears
from tests.helpers.torch_threads import torch_threads

pytestmark = pytest.mark.skipif(not kernel.available(), reason="no panel_linear kernel here (no C compiler?)")


def ordered_sums(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, ends: list[int]):
    """x W^T + b summed in the kernel's stated order, each step rounded to float32 as a fused multiply-add
    rounds it (the product and the sum exact in float64, then one rounding)."""
    x64, w64 = x.double(), weight.double()
    total = torch.zeros(x.shape[0], weight.shape[0]) if bias is None else bias.expand(x.shape[0], -1).clone()
    start = 0
    for end in ends:
        block = torch.zeros(x.shape[0], weight.shape[0], dtype=torch.float64)
        for k in range(start, end):
            block = (block + x64[:, k : k + 1] * w64[:, k]).float().double()
        total = total + block.float()
        start = end
    return total


@pytest.mark.parametrize("rows", [1, 3, 8, 9, 17, 40])
@pytest.mark.parametrize("out_features, in_features", [(48, 64), (37, 100), (20, 250), (33, 400), (16, 1)])
def test_the_kernel_sums_in_the_order_it_is_given(rows, out_features, in_features):
    generator = torch.Generator().manual_seed(rows * 1000 + out_features)
    weight = torch.randn(out_features, in_features, generator=generator)
    bias = torch.randn(out_features, generator=generator)
    x = torch.randn(rows, in_features, generator=generator)
    panels = kernel.pack(weight)
    for ends in (kernel.mkl_blocks(in_features), [in_features], sorted({min(7, in_features), in_features})):
        for b in (None, bias):
            ours = kernel.product(panels, out_features, b, ends)(x)
            assert torch.equal(ours, ordered_sums(x, weight, b, ends)), (ends, b is None)


def test_mkls_blocks():
    assert kernel.mkl_blocks(100) == [100]
    assert kernel.mkl_blocks(192) == [192]
    assert kernel.mkl_blocks(250) == [125, 250]
    assert kernel.mkl_blocks(384) == [192, 384]
    assert kernel.mkl_blocks(576) == [192, 384, 576]
    assert kernel.mkl_blocks(640) == [192, 384, 576, 640]


@pytest.mark.parametrize("rows", [1, 2, 4, 5, 8, 9, 16, 17, 64, 300])
@pytest.mark.parametrize("out_features, in_features", [(576, 576), (192, 576), (37, 100), (1, 33)])
def test_the_kernel_is_torchs_product(rows, out_features, in_features):
    generator = torch.Generator().manual_seed(rows * 1000 + out_features)
    weight = torch.randn(out_features, in_features, generator=generator)
    bias = torch.randn(out_features, generator=generator)
    x = torch.randn(1, rows, in_features, generator=generator)
    panels = kernel.pack(weight)
    for b in (None, bias):
        expected = torch.nn.functional.linear(x, weight, b)
        ours = kernel.panel_linear(x, panels, out_features, b)
        assert ours.shape == expected.shape
        torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_kernel_answers_the_same_bits_on_any_thread_count(threads):
    weight, x = torch.randn(1000, 300), torch.randn(70, 300)
    panels = kernel.pack(weight)
    expected = ordered_sums(x, weight, None, kernel.mkl_blocks(300))
    with torch_threads(threads):
        for rows in (3, 70):
            assert torch.equal(kernel.panel_linear(x[:rows], panels, 1000, None), expected[:rows])


def test_where_the_probe_says_so_the_kernel_has_mkls_bits():
    """On the AMD EPYC measured here every shape matches; where MKL sums otherwise (perhaps an Intel CPU) the probe
    says no and the engine keeps MKL for prefill. Either way the probe and a direct comparison agree."""
    for out_features, in_features, bias in [
        (576, 576, False),
        (64, 1536, False),
        (40, 250, True),
        (24, 640, True),
    ]:
        weight = torch.randn(out_features, in_features)
        b = torch.randn(out_features) if bias else None
        product = kernel.product(kernel.pack(weight), out_features, b)
        x = torch.randn(64, in_features)
        same = torch.equal(product(x), torch.nn.functional.linear(x, weight, b))
        assert kernel.matches_stock(weight, b, product) == same


def test_a_kernel_that_sums_otherwise_is_caught_by_the_probe():
    weight = torch.randn(64, 576)
    other_order = kernel.product(kernel.pack(weight), 64, None, [576])
    assert not kernel.matches_stock(weight, None, other_order)


def test_tensors_the_c_cannot_read_are_refused():
    weight = torch.randn(40, 24)
    panels = kernel.pack(weight)
    with pytest.raises(ValueError, match="float32 CPU"):
        kernel.panel_linear(torch.randn(3, 24).bfloat16(), panels, 40, None)
    with pytest.raises(ValueError, match="do not fit"):
        kernel.panel_linear(torch.randn(3, 25), panels, 40, None)
    with pytest.raises(ValueError, match="do not fit"):
        kernel.panel_linear(torch.randn(3, 24), panels, 49, None)
    with pytest.raises(ValueError, match="bias"):
        kernel.panel_linear(torch.randn(3, 24), panels, 40, torch.randn(39))
    with pytest.raises(ValueError, match="bias"):
        kernel.panel_linear(torch.randn(3, 24), panels, 40, torch.randn(40).double())
    # panels the C would read past: not the kernel's lanes, or strided
    lanes = kernel.lanes()
    with pytest.raises(ValueError, match="do not fit"):
        kernel.panel_linear(torch.randn(3, 24), panels.reshape(-1, 24, lanes // 2), 40, None)
    with pytest.raises(ValueError, match="contiguous"):
        kernel.panel_linear(
            torch.randn(3, 24), torch.randn(-(-40 // lanes), lanes, 24).transpose(1, 2), 40, None
        )
    with pytest.raises(ValueError, match="blocks"):
        kernel.product(panels, 40, None, [10, 20])
    with pytest.raises(ValueError, match="blocks"):
        kernel.product(panels, 40, None, [12, 12, 24])
    assert kernel.panel_linear(torch.randn(0, 24), panels, 40, None).shape == (0, 40)


@torch.inference_mode()
def test_forwards_of_a_model_go_through_the_kernel(monkeypatch):
    calls = []
    real = kernel.product

    def spied(*weights):
        call = real(*weights)

        def recorded(x):
            calls.append(x.shape)
            return call(x)

        recorded.panels = call.panels
        return recorded

    monkeypatch.setattr(kernel, "product", spied)
    model = random_model("llama:tiny", torch.float32, torch.device("cpu"))[0]
    packed = PackedLinears(model)
    for rows in (1, 8, 9, 16, 17, 40):
        ids = torch.randint(0, model.config.vocab_size, (1, rows))
        # one thread: MKL's stock product of 4 or more rows sums in its many-row order on any runner
        with torch_threads(1):
            stock = model(ids).logits
        calls.clear()
        with packed.swapped_in():
            ours = model(ids).logits
        # MKL's own bits where the probe found them
        if rows >= 4 and packed.exact_prefill:
            assert torch.equal(ours, stock)
        torch.testing.assert_close(ours, stock, rtol=1e-5, atol=1e-5)
        # decode-sized forwards always; prefill-sized ones where the kernel has MKL's bits
        assert bool(calls) == (rows <= packed_linear.MAX_ROWS or packed.exact_prefill)


def test_the_bench_compares_the_three_products_and_says_whose_bits():
    from engine.worker.kernels.linear_bench import compare, format_rows

    with torch_threads(1):
        rows = compare([(16, 48, 64), (1, 48, 64)], repeats=1)
    assert all(r["mkl"] > 0 and r["onednn"] > 0 and r["kernel"] > 0 for r in rows)
    weight = torch.randn(48, 64)
    probe = kernel.matches_stock(weight, None, kernel.product(kernel.pack(weight), 48, None))
    assert rows[0]["mkl_bits"] == probe
    text = format_rows(rows)
    assert "16 x 48 x 64" in text and "GFLOP/s" in text
    # the machine, the build's ISA, and the path the run plan's rule takes (KVTUI_PATHS forces it in the suite)
    assert text.splitlines()[0].startswith(path_probe.machine()) and "kernels built for" in text
    assert all(r["chosen"] == "kernel" for r in rows)
