"""Replay never shows a traceback: corrupted traces through the app's loading path (reader, then reducer, in
the load worker) and through `kvtui replay --check`. The events before the bad line are shown; a notice names
the line and the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvtui.app import KvtuiApp
from kvtui.commands.ui_commands import replay as replay_cmd

CHAT = Path(__file__).resolve().parents[3] / "fixtures" / "traces" / "chat.jsonl"
pytestmark = pytest.mark.anyio


def _damaged(kind: str) -> tuple[bytes, int | None]:
    """(file bytes, the line the viewer must name; None when the file is fine apart from a truncated tail)."""
    lines = CHAT.read_bytes().split(b"\n")[:-1]
    # schema-valid, but no such block: the reducer cannot apply it
    if kind == "block_outside_pool":
        j = next(i for i, line in enumerate(lines) if b'"block_allocated"' in line)
        event = json.loads(lines[j])
        event["physical"] = 10**6
        lines[j] = json.dumps(event).encode()
        return b"\n".join(lines) + b"\n", j + 1
    if kind == "flipped":
        lines[20] = lines[20][:5] + b"\xfe" + lines[20][6:]
        return b"\n".join(lines) + b"\n", 21
    if kind == "wrong_type":
        lines[30] = lines[30].replace(b'"type":', b'"seq":"x","type":', 1)
        return b"\n".join(lines) + b"\n", 31
    if kind == "truncated":
        data = b"\n".join(lines) + b"\n"
        return data[: len(data) // 2], None
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["block_outside_pool", "flipped", "wrong_type", "truncated"])
async def test_the_replay_app_loads_the_good_prefix_and_names_the_line(tmp_path, kind):
    data, line = _damaged(kind)
    path = tmp_path / "bad.jsonl"
    path.write_bytes(data)
    app = KvtuiApp(source=str(path), trace_path=str(path), open_interesting=True, frame_rate=None)
    async with app.run_test(size=(100, 32)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.timeline is not None and app.loading is None
        messages = [n.message for n in app._notifications]
        if line is not None:
            assert any(f"line {line}:" in m for m in messages), messages
            # every event before the named line
            assert len(app.timeline) == line - 2
        else:
            assert any("incomplete" in m for m in messages), messages
        for tab in ("pool", "requests", "tree", "metrics", "rings", "tokens"):
            app.action_show_tab(tab)
            await pilot.pause()
    assert app.return_code in (None, 0) and app._exception is None

    result = CliRunner().invoke(replay_cmd, [str(path), "--check"])
    assert (
        "Traceback" not in result.output
        and result.exception is None
        or isinstance(result.exception, SystemExit)
    )
    if line is not None:
        assert result.exit_code == 1 and f"line {line}:" in result.output, result.output
    else:
        assert result.exit_code == 0 and "the last line is incomplete" in result.output
