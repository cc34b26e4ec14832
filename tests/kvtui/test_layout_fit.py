"""What fits on screen at 120 and 80 columns: no line cut mid-word, the prompt box and the notifications."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.trace import read_trace
from kvtui.app import KvtuiApp
from kvtui.app.feed import EventFeed, RecordingController
from kvtui.app.feed_messages import FeedHeader, FeedNotice

pytestmark = pytest.mark.anyio
TRACES = Path(__file__).resolve().parents[2] / "fixtures" / "traces"


def screen_rows(app) -> list[str]:
    """The screen as a person sees it, one string per row."""
    return ["".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips()]


async def _replay(name: str, size: tuple[int, int], keys: list[str]) -> list[str]:
    path = str(TRACES / name)
    app = KvtuiApp(source=path, trace_path=path, open_interesting=True, frame_rate=None)
    async with app.run_test(size=size) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press(*keys)
        await pilot.pause()
        return screen_rows(app)


async def test_at_120_columns_the_status_line_keeps_the_request_and_the_step():
    rows = await _replay("shared_system_8users.jsonl", (120, 40), ["2"])
    assert rows[0].rstrip().endswith("step 25 · user7"), rows[0]


async def test_at_120_columns_long_lines_wrap_or_end_at_a_word():
    rows = "\n".join(await _replay("gemma3_hybrid_window.jsonl", (120, 40), ["4"]))
    # the metrics heading wraps whole
    assert "an edit is a new lookup, a preempted request's readmission is\n" in rows
    assert "\n    not)" in rows
    rows = "\n".join(await _replay("gemma3_hybrid_window.jsonl", (120, 40), ["l"]))
    # the roofline's measured line goes on under its label
    assert "\n             took 2.12s" in rows
    rows = "\n".join(await _replay("gemma3_hybrid_window.jsonl", (120, 40), ["5"]))
    assert "(1.3x; saved 3.9 MiB)" in rows and "· the 3 full layers page 3.8 MiB" in rows
    rows = await _replay("gemma3_hybrid_window.jsonl", (80, 24), ["5"])
    # too narrow for the sentence: it ends at a word, with an ellipsis
    assert rows[5].rstrip().endswith("rings 15.0 MiB, full attention would…"), rows[5]


async def test_at_80x24_the_prompt_box_is_one_row_and_notifications_leave_it_free():
    parsed = read_trace(TRACES / "edit_series.jsonl", strict=True)
    feed = EventFeed()
    app = KvtuiApp(source="m", live=True, feed=feed, controller=RecordingController(), frame_rate=None)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        feed.put(FeedHeader(parsed.header))
        for event in parsed.events:
            feed.put_event(event)
        feed.put(FeedNotice("edit failed: the edited request (300 tokens) does not fit the pool", "error"))
        app.pump()
        await pilot.pause(0.3)
        assert app.query_one("#prompt-bar").region.height == 1
        boxes = [app.query_one(f"#{name}").region for name in ("prompt", "temperature", "seed", "max-tokens")]
        toasts = [w.region for w in app.screen.walk_children() if type(w).__name__ == "Toast"]
        assert toasts and not any(t.overlaps(box) for t in toasts for box in boxes)
        # an engine error stays long enough to read
        assert [n.timeout for n in app._notifications if n.severity == "error"] == [30]
    # a tall terminal keeps the bordered boxes
    app = KvtuiApp(source="m", live=True, feed=EventFeed(), controller=RecordingController(), frame_rate=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.query_one("#prompt-bar").region.height == 3
