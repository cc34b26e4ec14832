"""Every command that reads a trace says the same one line about the same bad file (engine/trace/opening.py):
`stats`, `replay` (its --check, and the check before the UI opens), `export` and `whatif`. A bad file is a
non-zero exit; a last line cut mid-line is a warning and the command runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvtui.cli import main

CHAT = Path(__file__).resolve().parents[3] / "fixtures" / "traces" / "chat.jsonl"

STATS = ["stats", "{f}"]
CHECK = ["replay", "--check", "{f}"]
# fails before the UI opens, or it would open: only for files refused at their header
REPLAY = ["replay", "{f}"]
EXPORT = ["export", "{f}", "--perfetto", "{tmp}/out.pftrace"]
WHATIF = ["whatif", "{f}", "--capacity", "1k", "-q"]
EVERY = [STATS, CHECK, EXPORT, WHATIF]


def _bad_files() -> dict[str, bytes]:
    data = CHAT.read_bytes()
    lines = data.split(b"\n")
    proxy = {"arrival": 0.5, "request_id": "a", "prompt_token_ids": [1, 2, 3], "output_token_ids": [4]}
    return {
        "cut.jsonl": data.rstrip(b"\n")[:-40],
        "binary.jsonl": b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe",
        "binary_one_line.bin": b"\x89PNG\x00\x00\xff\xfe",
        "proxy.jsonl": (json.dumps(proxy) + "\n").encode(),
        # a trace saved as UTF-16 (its BOM first): bytes, not UTF-8 text, whichever reader opens it
        "utf16.jsonl": data.decode("utf-8").encode("utf-16"),
        "empty.jsonl": b"",
        "bad_json.jsonl": b"\n".join(lines[:5] + [b'{"seq": 5, "t": 0.1, "type": "block_fr'] + lines[5:]),
        "bad_event.jsonl": b"\n".join(
            lines[:5] + [b'{"seq": 5, "t": 0.1, "type": "block_freed"}'] + lines[5:]
        ),
    }


CUT = "{f}: the last line is incomplete (the writer stopped mid-line); ignored"
NOT_UTF8 = "{f}, line 1: not valid UTF-8 (byte 0x89 at byte 1)"
NOT_UTF8_BOM = "{f}, line 1: not valid UTF-8 (byte 0xff at byte 1)"
EMPTY = "{f}: empty file: no header line (a trace starts with one)"
PROXY = "{f}: a proxy log (kvtui proxy's request log), not a trace: run `kvtui whatif {f}` on it"
BAD_JSON = "{f}, line 6: not valid JSON (Unterminated string starting at, column 30)"
BAD_EVENT = "{f}, line 6: block_freed: missing field 'physical'"
MISSING = "File '{f}' does not exist."

CASES = [
    # (file, commands, the one line, exit code: 0 = runs with the line as a warning)
    ("cut.jsonl", EVERY, CUT, 0),
    ("binary.jsonl", [*EVERY, REPLAY], NOT_UTF8, 1),
    ("binary_one_line.bin", [*EVERY, REPLAY], NOT_UTF8, 1),
    ("utf16.jsonl", [*EVERY, REPLAY], NOT_UTF8_BOM, 1),
    ("empty.jsonl", [*EVERY, REPLAY], EMPTY, 1),
    ("proxy.jsonl", [STATS, CHECK, EXPORT, REPLAY], PROXY, 1),
    ("bad_json.jsonl", EVERY, BAD_JSON, 1),
    ("bad_event.jsonl", EVERY, BAD_EVENT, 1),
    ("missing.jsonl", [*EVERY, REPLAY], MISSING, 2),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("bad")
    for name, data in _bad_files().items():
        (tmp / name).write_bytes(data)
    return tmp


@pytest.mark.parametrize(
    "name,args,line,code",
    [(name, args, line, code) for name, commands, line, code in CASES for args in commands],
    ids=lambda v: v if isinstance(v, str) and "." in v else None,
)
def test_every_reader_says_the_same_line(folder, name, args, line, code):
    path = str(folder / name)
    argv = [a.replace("{f}", path).replace("{tmp}", str(folder)) for a in args]
    result = CliRunner().invoke(main, argv)
    expected = line.replace("{f}", path)
    said = [text for text in result.output.splitlines() if expected in text]
    assert len(said) == 1, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if code == 0:
        assert result.exit_code == 0, result.output
        assert said[0] == f"warning: {expected}"
    else:
        assert result.exit_code == code, result.output
        assert said[0].startswith("Error: ") and said[0].endswith(expected), said[0]


def test_a_proxy_log_runs_where_the_line_points(folder):
    result = CliRunner().invoke(main, ["whatif", str(folder / "proxy.jsonl"), "--capacity", "1k", "-q"])
    assert result.exit_code == 0, result.output
