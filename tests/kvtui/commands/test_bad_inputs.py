"""Every command checks its inputs before it works: numbers in range, files that are what they claim, addresses
that can be one. Each command line below is a user error: a non-zero exit, one line that names the bad value,
no traceback, and nothing started (no model loaded, no UI opened, no server run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvtui.cli import main
from tests.helpers.bad_input import assert_one_line_error, fill, write_files

ROOT = Path(__file__).resolve().parents[3]
CHAT = str(ROOT / "fixtures" / "traces" / "chat.jsonl")
SHARED = str(ROOT / "fixtures" / "traces" / "shared_system_8users.jsonl")
WORKLOAD = str(ROOT / "fixtures" / "workloads" / "chat.json")
LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 512}


def _config(**fields) -> bytes:
    return json.dumps({**LLAMA, **fields}).encode()


FILES = {
    "array.json": b"[1, 2]",
    "string.json": b'"llama"',
    "not_json.json": b"not json",
    "binary.json": b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe",
    "header_only.jsonl": b'{"type": "header", "schema": 1, "model": {}, "block_size": 16, "num_blocks": 4}\n',
    "empty_dir/.keep": b"",
    "ok_config.json": _config(),
    "negative_layers.json": _config(num_hidden_layers=-4),
    "float_layers.json": _config(num_hidden_layers=32.5),
    "bool_heads.json": _config(num_attention_heads=True),
    "zero_kv_heads.json": _config(num_key_value_heads=0),
    "negative_window.json": _config(sliding_window=-1),
    "layer_types_text.json": _config(layer_types="abc"),
    "narrow_hidden.json": _config(hidden_size=4),
    "negative_text_config.json": json.dumps(
        {"model_type": "gemma3", "text_config": {**LLAMA, "num_hidden_layers": -1}}
    ).encode(),
}

CASES = [
    # (command line with {file} placeholders, what its one line says: the bad value in it)
    # walkthrough finding 2: no worker is not one worker
    (["whatif", SHARED, "--workers", "0"], "'--workers': 0 is not in the range x>=1"),
    (["whatif", SHARED, "--workers", "-3"], "'--workers': -3 is not in the range x>=1"),
    # walkthrough finding 3: a config's numbers, and token counts, that no model has
    (["info", "--config", "{negative_layers.json}"], "num_hidden_layers is -4, not a whole number"),
    (
        ["info", "--config", "{ok_config.json}", "--tokens", "99999999999999999999"],
        "99999999999999999999 tokens is more than any KV cache holds",
    ),
    (["info", "--config", "{array.json}"], "a JSON array, not an object of fields"),
    (["info", "--config", "{string.json}"], "a JSON string, not an object of fields"),
    (["info", "--config", "{not_json.json}"], "not a readable JSON config"),
    (
        ["info", "--config", "{binary.json}"],
        "not a readable JSON config ('utf-8' codec can't decode byte 0x89",
    ),
    (
        ["whatif", SHARED, "--kv-config", "{binary.json}", "--capacity", "1GiB"],
        "binary.json: not a readable JSON config",
    ),
    (["info", "--config", "{float_layers.json}"], "num_hidden_layers is 32.5, not a whole number"),
    (["info", "--config", "{bool_heads.json}"], "num_attention_heads is True, not a whole number"),
    (["info", "--config", "{zero_kv_heads.json}"], "num_key_value_heads is 0, not a whole number"),
    (["info", "--config", "{negative_window.json}"], "sliding_window is -1, not a whole number"),
    (["info", "--config", "{layer_types_text.json}"], "layer_types is 'abc', not a list of names"),
    (["info", "--config", "{narrow_hidden.json}"], "hidden_size 4 is smaller than 8 attention heads"),
    (["info", "--config", "{negative_text_config.json}"], "num_hidden_layers is -1, not a whole number"),
    (["info", "--config", "{ok_config.json}", "--tokens", "-5"], "'-5': give a token count"),
    (["info", "--block-size", "0"], "'--block-size': 0 is not in the range 1<=x<=4096"),
    # whatif's other numbers, files and capacities
    (
        ["whatif", SHARED, "--kv-config", "{negative_layers.json}", "--capacity", "1GiB"],
        "num_hidden_layers is -4",
    ),
    (["whatif", SHARED, "--capacity", "99999999999999999999999"], "capacity '99999999999999999999999' is"),
    (["whatif", SHARED, "--trace-block-size", "0"], "'--trace-block-size': 0 is not in the range x>=1"),
    (["whatif", SHARED, "--per-request", "-1"], "'--per-request': -1 is not in the range x>=0"),
    (["whatif", SHARED, "--step-ms", "-5"], "'--step-ms': -5.0 is not in the range x>=0"),
    (["whatif", SHARED, "--prefill-us", "-1"], "'--prefill-us': -1.0 is not in the range x>=0"),
    (["whatif", SHARED, "--decode-ms", "-1"], "'--decode-ms': -1.0 is not in the range x>=0"),
    (["whatif", SHARED, "--router-temperature", "-1"], "'--router-temperature': -1.0 is not in the range"),
    (["whatif", SHARED, "--overlap-weight", "-1"], "'--overlap-weight': -1.0 is not in the range x>=0"),
    (["whatif", SHARED, "--tokenizer", "{tmp}/nope"], "nope' does not exist"),
    (
        ["whatif", WORKLOAD, "--tokenizer", "{empty_dir}"],
        "empty_dir (a directory without tokenizer.json: give a model directory, smollm2 or gemma3)",
    ),
    (["whatif", SHARED, "-o", "{tmp}/missing/x.jsonl"], "x.jsonl: no directory"),
    (["whatif", "{header_only.jsonl}"], "header_only.jsonl, line 1: header: field 'bytes_per_block'"),
    # whatif's options that would do nothing in the combination given
    (
        ["whatif", SHARED, "--router", "round_robin"],
        "--router routes requests among workers: give --workers N",
    ),
    (["whatif", SHARED, "--router-temperature", "1"], "--router-temperature routes requests among workers"),
    (
        ["whatif", SHARED, "--json", "--ui"],
        "--json prints the report, --ui shows it in the terminal: choose one",
    ),
    (["whatif", SHARED, "--as-recorded", "--capacity", "1k"], "own settings: leave out --capacity"),
    (
        ["whatif", SHARED, "--as-recorded", "--eviction", "lfu", "--workers", "2"],
        "leave out --eviction, --workers",
    ),
    (
        ["whatif", SHARED, "--capacity", "1GiB", "--kv-config", "{ok_config.json}", "--kv-dtype", "bf16,fp8"]
        + ["--host-capacity", "1k"],
        "priced at one K/V precision: give one --kv-dtype with --host-capacity",
    ),
    # whatif's tiers: a disk below no host, capacities in bytes without a model, prices of nothing
    (["whatif", SHARED, "--method", "one-pass", "--disk-capacity", "1k"], "give --host-capacity too"),
    (["whatif", SHARED, "--gpu-hour-cost", "2"], "--gpu-hour-cost: prices the tiers below the device"),
    (["whatif", SHARED, "--method", "one-pass", "--host-capacity", "1GiB"], "capacity '1GiB' is in bytes"),
    (["whatif", SHARED, "--method", "one-pass", "--host-capacity", "-5"], "capacity '-5': write tokens"),
    (
        ["whatif", SHARED, "--method", "one-pass", "--host-capacity", "1k", "--disk-capacity", "1k,0"],
        "capacity '0' is less than one block",
    ),
    (["whatif", SHARED, "--host-bandwidth", "0"], "'--host-bandwidth': 0.0 is not in the range x>0"),
    (["whatif", SHARED, "--disk-bandwidth", "-1"], "'--disk-bandwidth': -1.0 is not in the range x>0"),
    (["whatif", SHARED, "--gpu-tflops", "0"], "'--gpu-tflops': 0.0 is not in the range x>0"),
    (["whatif", SHARED, "--gpu-hour-cost", "-1"], "'--gpu-hour-cost': -1.0 is not in the range x>=0"),
    (
        ["whatif", SHARED, "--method", "one-pass", "--host-capacity", "1k", "--model-params", "-3B"],
        "'-3B': a model has more than 0 parameters",
    ),
    (
        ["whatif", SHARED, "--method", "one-pass", "--host-capacity", "1k", "--model-params", "lots"],
        "'lots': write a parameter count as 8B",
    ),
    (
        ["whatif", SHARED, "--method", "one-pass", "--host-capacity", "1k", "--gpu-hour-cost", "2"],
        "prices the seconds saved, which need the K/V bytes per token (--kv-config)",
    ),
    (
        ["whatif", SHARED, "--method", "one-pass", "--host-capacity", "1k", "--workers", "2"],
        "tiers are for one worker: leave out --workers",
    ),
    # the engine's options, wherever they are taken (the root command takes live's)
    (["generate", "hi", "--block-size", "99999999999999"], "99999999999999 is not in the range 1<=x<=4096"),
    (["generate", "hi", "--num-blocks", "0"], "'--num-blocks': 0 is not in the range 1<=x<=4194304"),
    (["generate", "hi", "--window-layout", "pages"], "'pages' is not one of 'ring', 'paged'"),
    (["generate", "hi", "--window-layout", "paged", "--partial-hits"], "drop --partial-hits"),
    (["live", "--window-layout", "paged", "--host-blocks", "8"], "drop --host-blocks"),
    (["generate", "hi", "--retention-interval", "16"], "add --window-layout paged, or drop it"),
    (["generate", "hi", "--window-layout", "paged", "--retention-interval", "x"], "'x' is not a retention"),
    (
        ["generate", "hi", "--window-layout", "paged", "--retention-interval", "10"],
        "a multiple of the block size 16 (got 10)",
    ),
    (["generate", "hi", "--num-blocks", "99999999999999999"], "99999999999999999 is not in the range"),
    (["generate", "hi", "--max-batched-tokens", "0"], "'--max-batched-tokens': 0 is not in the range x>=1"),
    (["generate", "hi", "--max-tokens", "0"], "'--max-tokens': 0 is not in the range x>=1"),
    (["generate", "hi", "--temperature", "-1"], "'--temperature': -1.0 is not in the range x>=0"),
    (["generate", "hi", "--top-p", "0"], "'--top-p': 0.0 is not in the range 0<x<=1"),
    (["generate", "hi", "--top-p", "2"], "'--top-p': 2.0 is not in the range 0<x<=1"),
    (["generate", "hi", "--top-k", "-1"], "'--top-k': -1 is not in the range x>=0"),
    (["generate", "hi", "--seed", "-1"], "'--seed': -1 is not in the range"),
    (["record", "-w", WORKLOAD, "-o", "{tmp}/t.jsonl", "--num-blocks", "-5"], "-5 is not in the range"),
    (
        ["record", "-w", "{binary.json}", "-o", "{tmp}/t.jsonl"],
        "binary.json: not UTF-8 text (byte 0x89 at byte 1)",
    ),
    # an option that would change nothing is refused
    (["info", "--tokens", "8192"], "--tokens counts a config's KV bytes: give --config FILE too"),
    (["live", "--max-tokens", "0"], "'--max-tokens': 0 is not in the range x>=1"),
    (["--block-size", "0"], "'--block-size': 0 is not in the range 1<=x<=4096"),
    (["--model", "gemma3", "generate", "hi"], "options before `generate` are live's (--model)"),
    (["compare-edit", "hi", "--width", "0"], "'--width': 0 is not in the range x>=1"),
    (["compare-edit", "hi", "-p", "-1"], "-1 is not in the range x>=0"),
    (["sinks", "--device", "cudax"], "'cudax' is not a device"),
    # benchmarks
    (["bench", "--prompt-tokens", "0"], "'--prompt-tokens': 0 is not in the range x>=1"),
    (["bench", "--concurrent", "-1"], "'--concurrent': -1 is not in the range x>=1"),
    (["bench", "live", "--seconds", "0"], "'--seconds': 0.0 is not in the range x>0"),
    (["bench", "live", "--size", "0x0"], "'0x0': give at least 40x12"),
    (["bench", "live", "--num-blocks", "0"], "'--num-blocks': 0 is not in the range 1<=x<=4194304"),
    (["bench", "decode", "--peak-tbs", "0"], "'--peak-tbs': 0.0 is not in the range x>0"),
    (["bench", "vllm", "--threads", "0"], "'--threads': 0 is not in the range x>=1"),
    (["bench", "vllm", "--dtype", "float8"], "'float8' is not one of"),
    (["bench", "vllm", "--url", "notaurl"], "no vLLM server at notaurl"),
    (["bench", "proxy", "--requests", "0"], "'--requests': 0 is not in the range x>=1"),
    (["bench", "whatif", "--workload", "{array.json}"], "array.json: no usable Mooncake line"),
    (["bench", "prefix", "--workload", "{array.json}"], "array.json: expected an object"),
    # servers and endpoints
    (
        ["attach", "tcp://127.0.0.1:5557", "--replay-timeout", "0"],
        "'--replay-timeout': 0.0 is not in the range",
    ),
    (["attach", "tcp://127.0.0.1:5557", "--tokenizer", "{empty_dir}"], "a directory without tokenizer.json"),
    (["proxy", "--upstream", "http://127.0.0.1:notaport"], "'http://127.0.0.1:notaport': give the server's"),
    (["proxy", "--upstream", "http://127.0.0.1:99999"], "'http://127.0.0.1:99999': give the server's"),
    (
        ["proxy", "--upstream", "http://127.0.0.1:8000", "--listen", "127.0.0.1:99999"],
        "'127.0.0.1:99999': give",
    ),
    (["serve", "--public-url", "notaurl", "replay", CHAT], "'notaurl': give the URL the browser opens"),
    (["stats", "{array.json}"], "array.json, line 1: first line must be the trace header"),
]


@pytest.fixture
def nothing_starts(monkeypatch):
    """A command that gets past its checks fails the test: no model loads, no UI or server runs."""
    import textual.app
    import textual_serve.server

    import engine.engine
    import engine.models.loading

    def started(*args, **kwargs):
        raise AssertionError("the command started working before it checked its inputs")

    monkeypatch.setattr(engine.engine.Engine, "load", started)
    monkeypatch.setattr(engine.models.loading, "load_model", started)
    monkeypatch.setattr(textual.app.App, "run", started)
    monkeypatch.setattr(textual_serve.server.Server, "serve", started)


@pytest.mark.parametrize("args, message", CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_bad_input_is_one_line_and_a_non_zero_exit(tmp_path, nothing_starts, args, message):
    files = {**write_files(tmp_path, FILES), "tmp": str(tmp_path)}
    assert_one_line_error(CliRunner().invoke(main, fill(args, files)), message)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_pool_that_does_not_fit_in_memory_is_one_line(monkeypatch, device):
    import engine.engine

    def out_of_memory(*args, **kwargs):
        # torch's words on the CPU, and what CUDA's OutOfMemoryError (a RuntimeError) says
        raise RuntimeError(
            "DefaultCPUAllocator: can't allocate memory"
            if device == "cpu"
            else "CUDA out of memory. Tried to allocate 3.00 TiB"
        )

    monkeypatch.setattr(engine.engine.Engine, "load", out_of_memory)
    result = CliRunner().invoke(main, ["generate", "hi", "--num-blocks", "4000000", "--device", device])
    assert_one_line_error(result, f"4000000 blocks of 16 tokens do not fit in memory on {device}")


def test_another_runtime_error_while_loading_is_not_called_memory(monkeypatch):
    import engine.engine

    def broken(*args, **kwargs):
        raise RuntimeError("something else")

    monkeypatch.setattr(engine.engine.Engine, "load", broken)
    result = CliRunner().invoke(main, ["generate", "hi"])
    assert isinstance(result.exception, RuntimeError) and "fit in memory" not in result.output


@pytest.mark.parametrize(
    "engine, message",
    [
        ({"block_size": 999999}, "block_size 999999 is more than 4096"),
        ({"num_blocks": 100000000}, "num_blocks 100000000 is more than 4194304"),
        ({"num_blocks": 0}, "num_blocks must be at least 1 (got 0)"),
    ],
)
def test_a_workloads_engine_section_is_held_to_the_same_ranges(tmp_path, nothing_starts, engine, message):
    workload = json.loads(Path(WORKLOAD).read_text())
    path = tmp_path / "w.json"
    path.write_text(json.dumps({**workload, "engine": engine}))
    result = CliRunner().invoke(main, ["record", "-w", str(path), "-o", str(tmp_path / "t.jsonl")])
    assert_one_line_error(result, message)
