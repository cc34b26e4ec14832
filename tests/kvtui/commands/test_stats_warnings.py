"""`kvtui stats` reads a trace with replay's reader and says what it skipped as replay does: an event type this
kvtui does not know, a last line cut in the middle."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kvtui.app.loader import load_trace, skipped_warnings
from kvtui.cli import main

CHAT = Path(__file__).resolve().parents[3] / "fixtures" / "traces" / "chat.jsonl"


def _odd_trace(tmp_path: Path) -> Path:
    lines = CHAT.read_text().splitlines()
    last = json.loads(lines[-1])
    future = {"seq": last["seq"] + 1, "t": last["t"], "type": "from_a_newer_kvtui", "x": 1}
    path = tmp_path / "odd.jsonl"
    # a cut last line: the writer stopped mid-line
    path.write_text("\n".join(lines + [json.dumps(future)]) + '\n{"seq": 99999, "t": 1.0, "ty')
    return path


def test_stats_says_what_replay_says_it_skipped(tmp_path):
    path = _odd_trace(tmp_path)
    said = skipped_warnings(load_trace(str(path)), str(path))
    assert len(said) == 2 and "from_a_newer_kvtui (1)" in said[1] and "incomplete" in said[0]
    for args in (["stats", str(path)], ["stats", "--json", str(path)]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        warned = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
        assert warned == [f"warning: {text}" for text in said]
