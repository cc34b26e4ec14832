"""An arrow key at the end of a request, and what a crash in the UI does to the exit status."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtui.app import KvtuiApp
from kvtui.widgets.token_strip import TokenStrip

pytestmark = pytest.mark.anyio
TRACE = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "edit_series.jsonl"


async def test_arrows_at_the_end_of_a_finished_request_keep_the_cursor_there():
    # `6`, then → or ↓ at the end: the cursor goes one place past the last token (where `i` adds a turn) and
    # stays there; `end` is the last token again, which a selection never passes
    app = KvtuiApp(source=str(TRACE), trace_path=str(TRACE), open_interesting=True, frame_rate=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("6")
        strip = app.query_one("#token-strip", TokenStrip)
        assert app.view.request.status == "finished"
        last = app.view.request.num_tokens - 1
        for key, where in (("right", last + 1), ("down", last + 1), ("right", last + 1), ("end", last)):
            await pilot.press(key)
            assert strip.position() == where, key
        # the cursor at the last token follows new tokens
        assert strip.cursor is None
        await pilot.press("shift+right")
        assert strip.position() == last and strip.selection() == (last, last + 1)
        await pilot.press("left")
        assert strip.position() == last - 1


def test_a_crash_in_the_ui_is_a_failed_exit(monkeypatch):
    from click.testing import CliRunner

    from kvtui.commands.ui_commands import replay

    def crashed_run(self):
        # what Textual leaves after printing an unhandled exception's traceback
        self._return_code = 1

    monkeypatch.setattr(KvtuiApp, "run", crashed_run)
    assert CliRunner().invoke(replay, [str(TRACE)]).exit_code == 1
    monkeypatch.setattr(KvtuiApp, "run", lambda self: None)
    assert CliRunner().invoke(replay, [str(TRACE)]).exit_code == 0
