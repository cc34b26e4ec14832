"""Both decode attention paths of a CPU float32 engine, for the exactness tests: the C kernel reading the pool in
place (engine/worker/kernels, where it can be built) and torch's (views of runs, gathers)."""

from __future__ import annotations

import pytest

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.worker.kernels import paged_decode
from tests.helpers.reference import no_cache_logits
from tests.helpers.tiny_models import random_prompts

DECODE_PATHS = ["kernel", "torch"]


def paged_engine(model, decode: str, **config) -> Engine:
    engine = Engine.from_model(model, config=EngineConfig(**config))
    if decode == "torch":
        engine.runner.in_place_decode = False
    elif not engine.runner.in_place_decode:
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
