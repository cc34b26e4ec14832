"""Both decode attention paths of a CPU float32 engine, for the exactness tests: the C kernel reading the pool in
place (engine/worker/kernels, where it can be built) and torch's (views of runs, gathers)."""

from __future__ import annotations

import pytest

from engine.engine import Engine, EngineConfig
from engine.worker.kernels import paged_decode

DECODE_PATHS = ["kernel", "torch"]


def paged_engine(model, decode: str, **config) -> Engine:
    engine = Engine.from_model(model, config=EngineConfig(**config))
    if decode == "torch":
        engine.runner.in_place_decode = False
    elif not engine.runner.in_place_decode:
        pytest.skip(f"no paged decode kernel here: {paged_decode.why_not()}")
    return engine
