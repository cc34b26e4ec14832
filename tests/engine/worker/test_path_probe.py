"""engine/worker/path_probe.py and its two users: a kernel is chosen only where it is exact and faster than torch's
op by the margin; a kernel that loses its race is not chosen (fake timings, so nothing here depends on this
machine's speed); KVTUI_PATHS forces either path; timings are kept per machine, kernel build, shape and threads."""

import json

import pytest
import torch

from engine.engine import Engine
from engine.worker import decode_probe, packed_linear, path_probe
from engine.worker.kernels import paged_decode, panel_linear
from engine.worker.packed_linear import PackedLinears
from engine.worker.run_plan import PAGED_DECODE, PANEL, SDPA, STOCK
from tests.helpers.tiny_models import tiny_model

kernels = pytest.mark.skipif(
    not (paged_decode.available() and panel_linear.available()), reason="the C kernels cannot be built here"
)


@pytest.fixture
def measured(monkeypatch, tmp_path):
    """The probe deciding (not forced), its timings kept in a folder of this test's own."""
    monkeypatch.setenv("KVTUI_PATHS", "measure")
    monkeypatch.setenv("KVTUI_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_the_kernel_must_beat_torch_by_the_margin():
    assert path_probe.faster(0.90, 1.0)
    assert path_probe.faster(1.0 - path_probe.MARGIN, 1.0)
    # faster, but within the margin: torch's op, which is exact by construction
    assert not path_probe.faster(0.99, 1.0)
    assert not path_probe.faster(1.5, 1.0)


def test_decide_takes_the_kernel_only_where_it_is_exact_and_faster(measured):
    assert path_probe.decide("op", True, lambda: (1.0, 2.0)).kernel
    losing = path_probe.decide("op", True, lambda: (2.0, 1.0))
    assert not losing.kernel and (losing.kernel_s, losing.torch_s) == (2.0, 1.0)
    assert losing.describe() == "op: torch (kernel 2.00 s, torch 1.00 s)"

    def never():
        raise AssertionError("a kernel that is not exact needs no race")

    inexact = path_probe.decide("op", False, never)
    assert not inexact.kernel and "bits" in inexact.reason


def test_kvtui_paths_forces_either_path_and_refuses_what_it_does_not_know(monkeypatch):
    def never():
        raise AssertionError("a forced path needs no race")

    monkeypatch.setenv("KVTUI_PATHS", "torch")
    assert not path_probe.decide("op", True, never).kernel
    monkeypatch.setenv("KVTUI_PATHS", "kernel")
    forced = path_probe.decide("op", True, never)
    assert forced.kernel and forced.reason == "KVTUI_PATHS=kernel"
    # forced to the kernel, still never where it is not exact
    assert not path_probe.decide("op", False, never).kernel
    monkeypatch.setenv("KVTUI_PATHS", "fast")
    with pytest.raises(ValueError, match="KVTUI_PATHS='fast': use one of kernel, torch, measure"):
        path_probe.decide("op", True, never)


def test_timings_are_kept_per_machine_build_shape_and_threads(measured, monkeypatch):
    key = path_probe.cache_key("linear", "panel_linear-abc", (576, 576, False, 1), 2)
    assert key.startswith("linear-")
    others = [
        path_probe.cache_key("linear", "panel_linear-abd", (576, 576, False, 1), 2),
        path_probe.cache_key("linear", "panel_linear-abc", (576, 576, False, 8), 2),
        path_probe.cache_key("linear", "panel_linear-abc", (576, 576, False, 1), 1),
        path_probe.cache_key("decode", "panel_linear-abc", (576, 576, False, 1), 2),
    ]
    assert len({key, *others}) == 5
    runs = []
    first = path_probe.cached_race("linear", "b", (1, 2), 2, lambda: runs.append(1) or (1e-5, 2e-5))
    again = path_probe.cached_race("linear", "b", (1, 2), 2, lambda: runs.append(1) or (9.0, 9.0))
    assert first == again == (1e-5, 2e-5) and len(runs) == 1
    kept = json.loads(
        (measured / "probes" / f"{path_probe.cache_key('linear', 'b', (1, 2), 2)}.json").read_text()
    )
    assert kept["machine"] == path_probe.machine() and kept["threads"] == 2
    # another CPU, or the same model without AVX-512, keeps timings of its own
    monkeypatch.setattr(path_probe, "machine", lambda: "AMD EPYC [avx2 fma f16c avx sse4_2]")
    assert path_probe.cache_key("linear", "panel_linear-abc", (576, 576, False, 1), 2) != key


def test_race_alternates_and_keeps_the_best_of_each():
    calls = []
    kernel_s, torch_s = path_probe.race(lambda: calls.append("k"), lambda: calls.append("t"), seconds=0.0)
    assert kernel_s >= 0 and torch_s >= 0
    # a warm-up each, then rounds in alternating order
    assert calls[:2] == ["k", "t"] and calls[2:4] == ["k", "t"] and calls[4:6] == ["t", "k"]


@kernels
def test_a_linear_whose_kernel_loses_every_race_stays_stock(measured, monkeypatch):
    monkeypatch.setattr(path_probe, "race", lambda kernel, torch_op, seconds=0: (2.0, 1.0))
    model = tiny_model("llama-gqa")
    packed = PackedLinears(model)
    assert packed.entries == [] and not packed.exact_prefill
    engine = Engine.from_model(model)
    plan = engine.runner.plan
    assert plan.linears == STOCK and engine.runner.linears is None
    assert (
        "linears",
        "torch.nn.Linear is faster here at every shape and row count (probe below)",
    ) in plan.why
    assert "one row: torch (kernel 2.00 s, torch 1.00 s)" in plan.describe()


@kernels
def test_a_kernel_that_wins_only_at_some_row_counts_runs_only_there(measured, monkeypatch):
    # the kernel wins a decode's rows and loses a prefill's
    def race(kernel, torch_op, seconds=0):
        return (1.0, 2.0) if kernel.args[0].shape[0] <= packed_linear.MAX_ROWS else (3.0, 1.0)

    monkeypatch.setattr(path_probe, "race", race)
    packed = PackedLinears(tiny_model("llama-gqa"))
    assert len(packed.entries) == sum(packed.shape_counts.values()) and packed.exact_count == 0
    module, forward = packed.entries[0]
    stock_calls = []
    stock = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *a: stock_calls.append(a[0].shape) or stock(*a))
    with torch.inference_mode():
        forward(torch.randn(1, 4, module.in_features))
        assert stock_calls == []
        forward(torch.randn(1, 40, module.in_features))
        assert stock_calls == [(1, 40, module.in_features)]


@kernels
def test_decode_attention_that_loses_its_race_takes_sdpa(measured, monkeypatch):
    monkeypatch.setattr(decode_probe, "_race", lambda *shape: (2.0, 1.0))
    plan = Engine.from_model(tiny_model("llama-gqa")).runner.plan
    assert plan.attention == SDPA and plan.linears == PANEL
    assert ("decode attention", "SDPA over gathered blocks is faster here (probe below)") in plan.why
    monkeypatch.setattr(decode_probe, "_race", lambda *shape: (1.0, 2.0))
    monkeypatch.setenv("KVTUI_CACHE_DIR", str(measured / "again"))
    assert Engine.from_model(tiny_model("llama-gqa")).runner.plan.attention == PAGED_DECODE


def test_the_decode_race_runs_on_the_shape_it_is_given():
    if not paged_decode.available():
        pytest.skip("no paged_decode kernel here")
    kernel_s, torch_s = decode_probe._race(2, 3, 64, 16)
    assert kernel_s > 0 and torch_s > 0


@kernels
def test_the_fused_step_takes_each_linear_s_product_once_per_step_by_its_rows(measured, monkeypatch):
    # the kernel wins a decode's rows and loses a prefill's: a step's products follow its row count
    def race(kernel, torch_op, seconds=0):
        # a linear's race is a partial over its rows; the decode attention's is not (it wins)
        rows = kernel.args[0].shape[0] if hasattr(kernel, "args") else 1
        return (1.0, 2.0) if rows <= packed_linear.MAX_ROWS else (3.0, 1.0)

    monkeypatch.setattr(path_probe, "race", race)
    runner = Engine.from_model(tiny_model("llama-gqa")).runner
    fused, linears = runner.fused, runner.linears
    kernels = set(map(id, linears.for_rows(1).values()))
    decode, decode_head = fused.products(linears, rows=4, kept=4)
    prefill, prefill_head = fused.products(linears, rows=40, kept=1)
    assert all(id(p) in kernels for layer in decode for p in layer) and id(decode_head) in kernels
    assert not any(id(p) in kernels for layer in prefill for p in layer)
    # the head multiplies the one row kept: a decode's bucket
    assert id(prefill_head) in kernels
    # chosen once: the same step size is the same products
    assert fused.products(linears, rows=4, kept=4)[0] is decode
