"""Decode steps of a few rows compute linear layers row by row (engine/worker/small_batch.py): same numbers."""

import torch
import torch.nn.functional as F
from tiny_models import tiny_model

import engine.worker.small_batch as small_batch
from engine.worker.small_batch import RowwiseLinear, rowwise_linear


def test_rowwise_linear_equals_f_linear_across_weight_slices(monkeypatch):
    # slices of 5 rows of the weight: the output is assembled from several
    monkeypatch.setattr(small_batch, "SLICE_BYTES", 5 * 24 * 4)
    torch.manual_seed(0)
    weight, bias, x = torch.randn(23, 24), torch.randn(23), torch.randn(1, 8, 24)
    assert torch.allclose(rowwise_linear(x, weight, bias), F.linear(x, weight, bias), atol=1e-5)
    assert rowwise_linear(x, weight, None).shape == (1, 8, 23)


def test_only_decode_forwards_of_two_to_sixteen_rows_go_row_by_row(monkeypatch):
    model = tiny_model("llama-gqa")
    switch = RowwiseLinear(model)
    calls = []
    monkeypatch.setattr(
        small_batch, "rowwise_linear", lambda x, w, b: calls.append(x.shape) or F.linear(x, w, b)
    )
    ids = torch.tensor([[5, 6, 7, 8]])
    model(ids)
    assert calls == []
    with switch.active(rows=4):
        model(ids)
    assert calls and all(shape[-2] == 4 for shape in calls)
    calls.clear()
    with switch.active(rows=1):
        model(ids[:, :1])
    with switch.active(rows=17):
        model(torch.arange(17)[None])
    assert calls == []
    # a second engine on the same model shares the switch instead of wrapping the layers again
    assert RowwiseLinear(model).switch is switch.switch
