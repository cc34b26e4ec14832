"""Both run plans of a CPU float32 engine, for the exactness tests: the one chosen for it (decode attention by the
C kernel reading the pool in place, where it can be built) and the reference plan that every other device and
dtype runs (torch's SDPA over gathered blocks, stock linears, the modules). engine/worker/run_plan.py."""

from __future__ import annotations

import pytest

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.worker.kernels import paged_decode
from engine.worker.run_plan import PAGED_DECODE, RunPlan
from engine.worker.runner import ModelRunner
from tests.helpers.reference import no_cache_logits
from tests.helpers.tiny_models import random_prompts

DECODE_PATHS = ["kernel", "reference"]


def engine_with_plan(model, plan: RunPlan, **config) -> Engine:
    """An engine on `model` whose runner was built with `plan` (each operation this machine cannot take as
    planned runs the reference path: engine.runner.plan says what runs)."""
    engine = Engine.from_model(model, config=EngineConfig(**config))
    chosen = engine.runner
    engine.runner = ModelRunner(
        model, chosen.kv, chosen.pool, chosen.windows, chosen.rings, plan, group_blocks=chosen.group_blocks
    )
    return engine


def paged_engine(model, decode: str, **config) -> Engine:
    if decode == "reference":
        return engine_with_plan(model, RunPlan.reference(), **config)
    engine = Engine.from_model(model, config=EngineConfig(**config))
    if engine.runner.plan.attention != PAGED_DECODE:
        pytest.skip(f"no paged decode kernel here: {paged_decode.why_not()}")
    return engine


def assert_decodes_match_no_cache(model, engine: Engine) -> None:
    """Equal prompt lengths, others, and a shared prefix through the prefix cache: every decoded token's logits
    against transformers' no-cache forward (1e-4)."""
    prompts = random_prompts([24, 24, 24, 37, 19], seed=3)
    prompts.append(prompts[0][:20] + random_prompts([9], seed=4)[0])
    assert_outputs_match_no_cache(
        model, engine.generate(prompts, SamplingParams(max_tokens=10, return_logits=True))
    )


def assert_outputs_match_no_cache(model, outputs) -> None:
    """Each output's logits (SamplingParams(return_logits=True)) against transformers' no-cache forward."""
    for out in outputs:
        ref = no_cache_logits(model, out.prompt_token_ids + out.token_ids)
        start = len(out.prompt_token_ids) - 1
        diff = (out.logits - ref[start : start + len(out.token_ids)]).abs().max().item()
        assert diff <= 1e-4, f"{out.request_id}: max abs logit diff {diff}"
