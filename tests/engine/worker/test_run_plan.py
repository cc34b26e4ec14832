"""engine/worker/run_plan.py: the runner chooses once, per device and dtype, which implementation runs each
operation, takes the reference path where the machine or the model cannot take the plan, and says so."""

import pytest
import torch

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.worker.kernels import decode_ops, paged_decode, panel_linear
from engine.worker.run_plan import FUSED, MODULES, PAGED_DECODE, PANEL, SDPA, STOCK, RunPlan
from tests.helpers.decode_paths import engine_with_plan
from tests.helpers.tiny_models import random_prompts, tiny_model

kernels = pytest.mark.skipif(
    not (paged_decode.available() and panel_linear.available() and decode_ops.available()),
    reason="the C kernels cannot be built here",
)


def test_a_float32_cpu_gets_the_c_kernels_and_every_other_device_and_dtype_the_reference():
    cpu = torch.device("cpu")
    assert RunPlan.for_device(cpu, torch.float32) == RunPlan(PAGED_DECODE, PANEL, FUSED)
    for device, dtype in [(cpu, torch.bfloat16), (torch.device("cuda"), torch.float32)]:
        assert RunPlan.for_device(device, dtype) == RunPlan.reference() == RunPlan(SDPA, STOCK, MODULES)


@kernels
def test_a_float32_cpu_llama_runs_the_kernels_and_the_fused_step():
    plan = Engine.from_model(tiny_model("llama-gqa")).runner.plan
    assert (plan.attention, plan.linears, plan.step) == (PAGED_DECODE, PANEL, FUSED)
    assert plan.why == () and plan.packed_linears > 0
    text = plan.describe()
    assert text.startswith("run plan (cpu torch.float32):")
    assert "decode attention   paged_decode: " in text and "step               fused: " in text


def test_a_bfloat16_cpu_model_runs_the_reference_plan():
    engine = Engine.from_model(tiny_model("llama-gqa").to(torch.bfloat16))
    plan = engine.runner.plan
    assert (plan.attention, plan.linears, plan.step) == (SDPA, STOCK, MODULES)
    assert engine.runner.linears is None and engine.runner.fused is None
    assert "run plan (cpu torch.bfloat16):" in plan.describe()


def test_what_the_machine_cannot_take_runs_the_reference_path_and_the_plan_says_why(monkeypatch):
    monkeypatch.setattr(paged_decode, "usable", lambda device, dtype: False)
    monkeypatch.setattr(panel_linear, "available", lambda: False)
    model = tiny_model("llama-gqa")
    plan = Engine.from_model(model).runner.plan
    assert (plan.attention, plan.linears) == (SDPA, STOCK)
    why = dict(plan.why)
    assert set(why) >= {"decode attention", "linears"}
    assert "(linears: no panel_linear kernel" in plan.describe()


def test_window_layers_are_described():
    engine = Engine.from_model(tiny_model("mistral-mqa", sliding_window=8), config=EngineConfig(block_size=4))
    plan = engine.runner.plan
    assert plan.rings and plan.step == MODULES
    assert "window layers      rings" in plan.describe()


def test_a_cuda_plan_is_described_without_a_gpu():
    text = RunPlan(device="cuda", dtype="torch.bfloat16").describe()
    assert (
        "decode attention   sdpa: " in text and "lower-right" in text and "linears            stock" in text
    )


@kernels
def test_a_plan_given_to_the_runner_is_the_one_it_runs(monkeypatch):
    model = tiny_model("llama-gqa")
    engine = engine_with_plan(model, RunPlan.reference(), block_size=4, num_blocks=64)
    assert engine.runner.linears is None and engine.runner.fused is None
    assert engine.runner.plan.attention == SDPA
    # the reference plan never calls the C decode kernel
    calls = []
    real = paged_decode._kernel
    monkeypatch.setattr(paged_decode, "_kernel", lambda: calls.append(1) or real())
    engine.generate(random_prompts([9, 14]), SamplingParams(max_tokens=5))
    assert not calls
