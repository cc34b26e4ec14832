"""User errors get one line and a non-zero exit, never a traceback: bad trace files, bad workloads, bad options,
bad model paths, an edit out of range."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvtui.cli import main
from tests.helpers.bad_input import assert_one_line_error as _assert_one_line_error

CHAT = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "chat.jsonl"
WORKLOAD = str(Path(__file__).resolve().parents[2] / "fixtures" / "workloads" / "chat.json")


def _files(tmp: Path) -> dict[str, str]:
    """Bad inputs written once per test: name -> path."""
    lines = CHAT.read_bytes().split(b"\n")
    made = {
        "empty.jsonl": b"",
        "binary.jsonl": b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe",
        "not_trace.jsonl": b'{"hello": "world"}\n',
        "schema99.jsonl": b'{"type": "header", "schema": 99}\n',
        "bad_line.jsonl": b"\n".join(
            lines[:5] + [b'{"seq": 4, "t": 0.1, "type": "block_freed"}'] + lines[5:]
        ),
        "workload_json.json": b'{"requests": [',
        "workload_field.json": json.dumps(
            {"requests": [{"prompt": "x", "sampling": {"max_tokenz": 3}}]}
        ).encode(),
        "workload_empty.json": b'{"requests": []}',
        "empty_dir/.keep": b"",
        "model.gguf": b"GGUF\x03\x00\x00\x00",
        "random.gguf": bytes(range(256)) * 4,
        "bad_config/config.json": b'{"model_type": "no-such-architecture"}',
        "abc_config.json": json.dumps(
            {"model_type": "llama", "num_hidden_layers": "abc", "num_attention_heads": 8, "hidden_size": 512}
        ).encode(),
    }
    for name, data in made.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return {name.split("/")[0]: str(tmp / name.split("/")[0]) for name in made}


CASES = [
    # (args with {file} placeholders, what the one-line message says)
    (["stats", "{tmp}/missing.jsonl"], "does not exist"),
    (["stats", "{empty_dir}"], "is a directory"),
    (["stats", "{empty.jsonl}"], "empty file"),
    (["stats", "{binary.jsonl}"], "not valid UTF-8"),
    (["stats", "{not_trace.jsonl}"], "first line must be the trace header"),
    (["stats", "--json", "{schema99.jsonl}"], "schema version 99"),
    (["replay", "{binary.jsonl}"], "line 1: not valid UTF-8"),
    (["replay", "--check", "{bad_line.jsonl}"], "line 6: block_freed: missing field 'physical'"),
    (["export", "{not_trace.jsonl}", "--perfetto", "{tmp}/o.pftrace"], "header"),
    (["record", "-w", "{workload_json.json}", "-o", "{tmp}/t.jsonl"], "line 1"),
    (["record", "-w", "{workload_field.json}", "-o", "{tmp}/t.jsonl"], "unknown sampling fields"),
    (["record", "-w", "{workload_empty.json}", "-o", "{tmp}/t.jsonl"], "non-empty list"),
    (["generate", "hi", "--device", "cudax"], "'cudax' is not a device"),
    (["generate", "hi", "--device", "cuda:x"], "use auto, cpu, cuda or cuda:N"),
    (["generate", "hi", "--dtype", "float8"], "'float8' is not one of"),
    (["generate", "hi", "--block-size", "0"], "0 is not in the range 1<=x<=4096"),
    (["generate", "hi", "--eviction", "random"], "'random' is not one of"),
    (["generate", "hi", "--model", "{empty_dir}"], "without config.json"),
    (["generate", "hi", "--model", "{model.gguf}"], "not a readable GGUF file"),
    (["generate", "hi", "--model", "{random.gguf}"], "not a readable GGUF file"),
    (["generate", "hi", "--model", "{tmp}/nope.gguf"], "no such GGUF file"),
    (["generate", "hi", "--model", "{bad_config}"], "could not load model"),
    (["info", "--model", "{tmp}/no/such/dir"], "not a model directory"),
    (["bench", "live", "--device", "gpu0"], "'gpu0' is not a device"),
    # files to write in a directory that does not exist: said before any model loads
    (["record", "-w", WORKLOAD, "-o", "{tmp}/missing/dir/x.jsonl"], "missing/dir/x.jsonl: no directory"),
    (["live", "--save-trace", "{tmp}/missing/dir/l.jsonl"], "l.jsonl: no directory"),
    (["generate", "hi", "--trace", "{tmp}/missing/t.jsonl"], "t.jsonl: no directory"),
    (["export", str(CHAT), "--perfetto", "{tmp}/missing/o.pftrace"], "o.pftrace: no directory"),
    (
        ["attach", "tcp://127.0.0.1:1", "--headless", "-o", "{tmp}/missing/dir/a.jsonl"],
        "a.jsonl: no directory",
    ),
    (["record", "-w", WORKLOAD, "-o", "{empty_dir}"], "is a directory"),
    (["info", "--config", "{abc_config.json}"], "num_hidden_layers is 'abc', not a whole number"),
    (["serve", "replay", str(CHAT), "--port", "70000"], "70000 is not in the range 1-65535"),
    (["serve", "replay", str(CHAT), "--port", "http"], "'http' is not a port number"),
]


def _invoke(args: list[str], tmp_path: Path):
    files = {**_files(tmp_path), "tmp": str(tmp_path)}
    for name, path in files.items():
        args = [arg.replace("{" + name + "}", path) for arg in args]
    return CliRunner().invoke(main, args)


@pytest.mark.parametrize("args, message", CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_bad_input_is_one_line_and_a_non_zero_exit(tmp_path, args, message):
    _assert_one_line_error(_invoke(args, tmp_path), message)


@pytest.mark.smollm2
def test_a_workload_edit_out_of_range_is_one_line(tmp_path):
    workload = tmp_path / "w.json"
    workload.write_text(
        json.dumps(
            {
                "requests": [{"id": "a", "prompt_token_ids": [1, 2, 3, 4, 5], "sampling": {"max_tokens": 2}}],
                "edits": [
                    {
                        "request_id": "a",
                        "after_finish": True,
                        "position": 99,
                        "kind": "replace",
                        "token_ids": [7],
                    }
                ],
            }
        )
    )
    result = CliRunner().invoke(
        main, ["record", "-w", str(workload), "-o", str(tmp_path / "t.jsonl"), "--num-blocks", "16"]
    )
    _assert_one_line_error(result, "cannot replace 1 token(s) at position 99")


def test_live_refuses_a_model_directory_without_config_before_opening(tmp_path):
    result = CliRunner().invoke(main, ["live", "--model", str(tmp_path)])
    _assert_one_line_error(result, "without config.json")


@pytest.mark.parametrize(
    "args",
    [
        ["record", "-w", WORKLOAD, "-o", "{tmp}/missing/x.jsonl"],
        ["live", "--save-trace", "{tmp}/missing/l.jsonl"],
        ["generate", "hi", "--trace", "{tmp}/missing/t.jsonl"],
    ],
    ids=["record", "live", "generate"],
)
def test_a_missing_output_directory_is_said_before_any_model_loads(tmp_path, monkeypatch, args):
    import engine.engine

    def no_loading(*args, **kwargs):
        raise AssertionError("the model started loading")

    monkeypatch.setattr(engine.engine.Engine, "load", no_loading)
    result = _invoke(args, tmp_path)
    _assert_one_line_error(result, "no directory")
    assert "could not load model" not in result.output


def test_serve_on_a_port_in_use_is_one_line(tmp_path):
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result = _invoke(["serve", "--port", str(port), "replay", str(CHAT)], tmp_path)
        _assert_one_line_error(result, f"port {port} on 127.0.0.1 is in use")


def test_serve_options_after_the_served_command_reach_serve(tmp_path, monkeypatch):
    import textual_serve.server

    started = {}

    class FakeServer:
        def __init__(self, command, host, port, title, public_url):
            started.update(command=command, host=host, port=port)
            self.public_url = f"http://{host}:{port}"

        def serve(self):
            started["served"] = True

    monkeypatch.setattr(textual_serve.server, "Server", FakeServer)
    result = CliRunner().invoke(main, ["serve", "replay", str(CHAT), "--port", "8765", "--host=127.0.0.2"])
    assert result.exit_code == 0, result.output
    assert (started["host"], started["port"], started["served"]) == ("127.0.0.2", 8765, True)
    # the served kvtui gets only its own arguments
    assert "--port" not in started["command"] and started["command"].endswith(f"replay {CHAT}")
