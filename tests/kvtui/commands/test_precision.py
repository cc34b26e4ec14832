"""`kvtui precision`: the cost of 8-bit K/V against the exact cache (kvtui/commands/precision_run.py), its table,
and the trace whose replay colours each token by its KL divergence."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from engine.trace import read_trace
from kvtui.cli import main
from kvtui.commands.precision_commands import percentile
from kvtui.commands.precision_run import EXACT, measure
from kvtui.commands.sinks_commands import reference_text
from kvtui.state.cache_state import CacheState
from kvtui.widgets.base import View
from kvtui.widgets.token_strip import TokenStrip
from tests.helpers.tiny_models import random_prompts, tiny_model


def test_the_exact_cache_against_itself_costs_nothing_and_8_bits_cost_something():
    model = tiny_model("llama-gqa")
    tokens = random_prompts([70], seed=2)[0]
    messages = []
    costs = measure(model, None, "tiny", tokens, ["int8", "fp8_e4m3"], chunk=32, say=messages.append)
    exact, int8, fp8 = costs
    assert [c.kv_dtype for c in costs] == [EXACT, "int8", "fp8_e4m3"]
    # three steps of 32, 32 and 6 positions; every position but the last predicts a token of the text
    assert len(messages) == 3 and len(int8.kl) == len(fp8.kl) == len(exact.logprobs) == 69
    assert all(v >= 0 for v in int8.kl) and sum(int8.kl) > 0
    # 3 layers x 2 x 2 KV heads x (8 + 4) bytes against 8 x 4
    assert (exact.bytes_per_token, int8.bytes_per_token) == (3 * 2 * 2 * 8 * 4, 3 * 2 * 2 * 12) == (384, 144)
    assert len(int8.layer_errors()) == 3 and 0 < int8.layer_errors()[-1] < 0.1
    layer, growth = fp8.worst_layer()
    assert 0 <= layer < 3 and growth > 0
    # the perplexity of each is the text's, through its own cache
    assert math.isfinite(exact.logprobs[0]) and exact.logprobs != int8.logprobs


def test_percentile_by_nearest_rank():
    assert percentile(list(range(1, 101)), 99) == 99 and percentile([3.0], 99) == 3.0
    assert math.isnan(percentile([], 50))


@pytest.fixture(scope="module")
def precision_trace(tmp_path_factory):
    folder = tmp_path_factory.mktemp("precision")
    text = folder / "text.txt"
    text.write_text(reference_text()[:2000])
    out = folder / "kv.jsonl"
    args = ["precision", str(text), "-m", "random:llama:tiny", "--tokens", "60", "--chunk", "16"]
    result = CliRunner().invoke(main, [*args, "--kv-dtype", "fp8", "--trace", str(out)])
    return result, out


def test_the_command_prints_a_row_per_precision_and_writes_a_trace(precision_trace):
    result, out = precision_trace
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.output.splitlines() if line[:4] in ("floa", "fp8_")}
    assert set(rows) == {"float32", "fp8_e4m3"}
    assert "(the exact cache)" in rows["float32"] and "layer" in rows["fp8_e4m3"]
    trace = read_trace(str(out), strict=True)
    assert trace.header["kv_dtype"] == "fp8_e4m3"
    divergences = [e for e in trace.events if e["type"] == "kv_divergence"]
    assert [e["start"] for e in divergences] == [0, 16, 32, 48]
    assert sum(len(e["kl"]) for e in divergences) == 59


def test_replay_colours_each_token_by_its_kl(precision_trace):
    _, out = precision_trace
    trace = read_trace(str(out), strict=True)
    state = CacheState(trace.header)
    state.apply_all(trace.events)
    req = state.requests["text"]
    assert req.kl_dtype == "fp8_e4m3" and len(req.kl) == 59 and req.kl[0] is not None
    widget = TokenStrip(View(state, "text"))
    assert "next-token KL vs exact" in widget.render_line(2).text
    palette = widget.palette()
    roles = {palette[f"kl-{i}"] for i in range(4)}
    # every measured token has its KL's decade as its colour (runs of one colour are one segment; the margin
    # first)
    tokens = [
        segment for row in range(3, widget.row_count(80)) for segment in list(widget.render_line(row))[1:]
    ]
    styled = [segment.style for segment in tokens if segment.style is not None and segment.text.strip()]
    assert styled[0] == palette[f"kl-{req.kl_bin(0)}"]
    # the last prompt token and the generated one were not measured: their own colours (and the finished
    # request's end slot after them, dim)
    unmeasured = {
        palette[r] for r in ("token-cursor", "prompt-a", "prompt-b", "generated-a", "generated-b", "dim")
    }
    assert set(styled) - unmeasured <= roles and set(styled) & roles
