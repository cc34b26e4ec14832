"""engine/worker/kernels/small_linear.c: a few rows times a weight matrix through panels of 16 outputs, the
product torch computes (float32 rounding), for any row count it takes, output counts that are no multiple of
16, with and without a bias, on any thread count; and inside the engine's forward where MKL is slow."""

from __future__ import annotations

import pytest
import torch

from engine.models.random_models import random_model
from engine.worker import packed_linear
from engine.worker.kernels import small_linear as kernel
from engine.worker.packed_linear import PackedLinears

pytestmark = pytest.mark.skipif(not kernel.available(), reason="no small_linear kernel here (no C compiler?)")


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 7, 8, 11, 16])
@pytest.mark.parametrize("out_features, in_features", [(576, 576), (192, 576), (37, 100), (16, 1), (1, 33)])
def test_the_kernel_is_torchs_product(rows, out_features, in_features):
    generator = torch.Generator().manual_seed(rows * 1000 + out_features)
    weight = torch.randn(out_features, in_features, generator=generator)
    bias = torch.randn(out_features, generator=generator)
    x = torch.randn(1, rows, in_features, generator=generator)
    panels = kernel.pack(weight)
    for b in (None, bias):
        expected = torch.nn.functional.linear(x, weight, b)
        ours = kernel.small_linear(x, panels, out_features, b)
        assert ours.shape == expected.shape
        torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_kernel_answers_the_same_on_any_thread_count(threads):
    weight, x = torch.randn(1000, 300), torch.randn(5, 300)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        ours = kernel.small_linear(x, kernel.pack(weight), 1000, None)
    finally:
        torch.set_num_threads(before)
    torch.testing.assert_close(ours, x @ weight.T, rtol=1e-5, atol=1e-4)


def test_more_rows_than_one_pass_takes_run_in_passes():
    weight, x = torch.randn(40, 24), torch.randn(2, 17, 24)
    torch.testing.assert_close(
        kernel.small_linear(x, kernel.pack(weight), 40, None), x @ weight.T, rtol=1e-5, atol=1e-4
    )


def test_tensors_the_c_cannot_read_are_refused():
    weight = torch.randn(40, 24)
    panels = kernel.pack(weight)
    with pytest.raises(ValueError, match="float32 CPU"):
        kernel.small_linear(torch.randn(3, 24).bfloat16(), panels, 40, None)
    with pytest.raises(ValueError, match="do not fit"):
        kernel.small_linear(torch.randn(3, 25), panels, 40, None)
    with pytest.raises(ValueError, match="do not fit"):
        kernel.small_linear(torch.randn(3, 24), panels, 49, None)
    with pytest.raises(ValueError, match="bias"):
        kernel.small_linear(torch.randn(3, 24), panels, 40, torch.randn(39))


@torch.inference_mode()
def test_decode_sized_forwards_of_a_model_go_through_the_kernel(monkeypatch):
    monkeypatch.setattr(packed_linear, "MIN_ROWS", 1)
    calls = []
    real = kernel.product

    def spied(*weights):
        call = real(*weights)
        return lambda x: calls.append(x.shape) or call(x)

    monkeypatch.setattr(kernel, "product", spied)
    model = random_model("llama:tiny", torch.float32, torch.device("cpu"))[0]
    packed = PackedLinears(model)
    for rows in (1, 8, 9, 16, 17):
        ids = torch.randint(0, model.config.vocab_size, (1, rows))
        stock = model(ids).logits
        calls.clear()
        with packed.small(rows):
            ours = model(ids).logits
        torch.testing.assert_close(ours, stock, rtol=1e-5, atol=1e-5)
        # decode-sized forwards (up to 16 rows), not prefill-sized ones
        assert bool(calls) == (rows <= packed_linear.MAX_ROWS)
