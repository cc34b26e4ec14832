"""Smoke tests of the headless commands, run through click on the embedded model."""

import json

import pytest
from click.testing import CliRunner

from engine.trace import read_trace
from kvtui.cli import main


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_schema_lists_events():
    result = run("schema")
    assert result.exit_code == 0 and "block_allocated:" in result.output


def test_help_teaches_with_examples():
    result = run("--help")
    assert result.exit_code == 0 and "kvtui record" in result.output


def test_unknown_model_is_a_clear_error(tmp_path):
    result = run("info", "--model", str(tmp_path / "nope"))
    assert result.exit_code != 0 and "not a model directory" in result.output


def test_bad_workload_names_the_problem(tmp_path):
    bad = tmp_path / "w.json"
    bad.write_text('{"requests": [{"id": "a"}]}')
    result = run("record", "-w", str(bad), "-o", str(tmp_path / "t.jsonl"))
    assert result.exit_code != 0 and "requests[0]" in result.output


@pytest.mark.smollm2
def test_info_shows_kv_arithmetic():
    result = run("info", "--num-blocks", "10")
    assert result.exit_code == 0
    # 2 x 30 layers x 3 kv heads x 64 x 4 bytes
    assert "46,080 B per token" in result.output
    assert "7,372,800 B (formula)" in result.output and "7,372,800 B allocated" in result.output


@pytest.mark.smollm2
def test_generate_streams_text_and_timings(tmp_path):
    trace = tmp_path / "g.jsonl"
    result = run("generate", "What is the capital of France?", "--max-tokens", "8", "--trace", str(trace))
    assert result.exit_code == 0, result.output
    assert "Paris" in result.output and "TTFT" in result.output
    assert any(e["type"] == "token_emitted" for e in read_trace(trace, strict=True).events)
    # the summary names the modes that differ from the defaults
    assert "whole-block" not in result.output
    whole = run("generate", "Hi", "--max-tokens", "2", "--whole-blocks", "--no-prefix-cache")
    assert "; whole-block hits, no prefix cache" in whole.output


@pytest.mark.smollm2
def test_record_writes_a_valid_trace(tmp_path):
    workload = tmp_path / "w.json"
    workload.write_text(
        json.dumps(
            {
                "requests": [
                    {"id": "a", "prompt": "Hello", "sampling": {"max_tokens": 3}},
                    {
                        "id": "b",
                        "arrival_step": 1,
                        "messages": [{"role": "user", "content": "Hi"}],
                        "sampling": {"max_tokens": 3},
                    },
                ]
            }
        )
    )
    out = tmp_path / "t.jsonl"
    result = run("record", "-w", str(workload), "-o", str(out), "--num-blocks", "32")
    assert result.exit_code == 0, result.output
    trace = read_trace(out, strict=True)
    finished = [e["request_id"] for e in trace.events if e["type"] == "request_finished"]
    assert sorted(finished) == ["a", "b"]


def test_unreachable_hub_id_is_a_clear_error():
    result = run("info", "--model", "kvtui-test/does-not-exist")
    assert result.exit_code != 0 and "kvtui-test/does-not-exist" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "args,message",
    [
        (["--max-batched-tokens", "0"], "0 is not in the range x>=1"),
        (["--device", "tpu"], "is not a device"),
        (["--num-blocks", "0"], "0 is not in the range 1<=x<=4194304"),
    ],
)
def test_bad_engine_options_are_errors_not_tracebacks(args, message):
    result = run("info", *args)
    assert result.exit_code != 0 and message in result.output and "Traceback" not in result.output


def test_the_paged_window_layout_serves_whole_blocks_unless_partial_hits_is_typed(tmp_path):
    from kvtui.commands.engine_options import engine_config

    # --partial-hits is on by default, but not typed: the paged layout's whole blocks stand
    assert engine_config(window_layout="paged", partial_hits=True).partial_hits is False
    result = run("info", "--window-layout", "paged", "--partial-hits", "--model", str(tmp_path / "nope"))
    assert result.exit_code != 0 and "whole blocks" in result.output and "Traceback" not in result.output
