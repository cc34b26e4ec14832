"""Tab 4's bytes-per-token formula is spelled by the function `kvtui info` uses: with 8-bit K/V it shows the
float32 scale of each row, and its arithmetic gives the figure the header (and the pool) count."""

from __future__ import annotations

import re

import pytest

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.models.kv_precision import describe_row
from kvtui.commands.info_commands import format_info
from kvtui.state import CacheState
from kvtui.state.kv_bytes import bytes_per_token_formula, header_shape
from kvtui.widgets.charts import memory_lines
from tests.helpers.tiny_models import random_prompts, tiny_model


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8_e4m3", None])
def test_the_formula_shows_the_scales_and_equals_the_headers_bytes_per_token(kv_dtype):
    engine = Engine.from_model(
        tiny_model("llama-gqa"),
        config=EngineConfig(device="cpu", block_size=4, num_blocks=32, kv_dtype=kv_dtype),
    )
    events: list[dict] = []
    engine.trace.listeners.append(events.append)
    engine.submit(random_prompts([9])[0], SamplingParams(max_tokens=2))
    engine.step()
    header = engine.trace.header
    state = CacheState(header)
    state.apply_all(events)
    shape = engine.shape
    row = describe_row(shape.head_dim, shape.elem_bytes, shape.kv_dtype)
    # kvtui info spells the row with the same function
    assert f"x {row} =" in format_info(engine)
    formula = f"2 x {len(shape.paged_layers)} layers x {shape.kv_heads} kv_heads x {row}"
    assert bytes_per_token_formula(header) == formula
    line = memory_lines(state)[1]
    assert "/token = " in line and line.endswith(f"({formula})")
    if kv_dtype is not None:
        assert formula.endswith(f"({shape.head_dim} x 1 B {kv_dtype} + a 4 B float32 scale)")
    # the formula's arithmetic is the header's figure
    layers, heads = map(int, re.findall(r"(\d+) (?:layers|kv_heads)", formula))
    per_row = shape.head_dim + 4 if kv_dtype else shape.head_dim * shape.elem_bytes
    assert (
        2 * layers * heads * per_row == header["bytes_per_token"] == header_shape(header).kv_bytes_per_token()
    )


def test_a_header_whose_figure_disagrees_with_its_model_says_both():
    header = {
        "model": {
            "name": "m",
            "layers": 4,
            "q_heads": 2,
            "kv_heads": 2,
            "head_dim": 16,
            "dtype": "float32",
            "elem_bytes": 4,
            "windows": [None, 6, None, 6],
        },
        "bytes_per_token": 1024,
    }
    assert (
        bytes_per_token_formula(header)
        == "2 x 2 layers x 2 kv_heads x 16 x 4 B = 512 B, but the header says 1,024 B"
    )
