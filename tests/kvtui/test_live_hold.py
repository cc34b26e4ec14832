"""Holding the live engine between steps (`h`) and stepping it one step at a time (`n`)."""

from __future__ import annotations

import time

import pytest

from engine.engine import Engine, EngineConfig
from kvtui.app import KvtuiApp
from kvtui.app.feed import EngineWorker, EventFeed, RecordingController
from kvtui.app.feed_messages import FeedEvent, FeedHeader
from kvtui.screens.help import CONCEPTS
from tests.helpers.tiny_models import tiny_model

pytestmark = pytest.mark.anyio


async def test_h_holds_and_n_steps_and_the_footer_and_help_say_so(small_trace):
    header, _ = small_trace
    feed, controller = EventFeed(), RecordingController()
    app = KvtuiApp(
        source="e", live=True, feed=feed, controller=controller, clock=lambda: 0.0, frame_rate=None
    )
    async with app.run_test(size=(100, 30)) as pilot:
        feed.put(FeedHeader(header))
        app.pump()
        await pilot.press("escape", "n")
        # not held: n says how to hold, and sends nothing
        assert not controller.calls
        await pilot.press("h")
        assert controller.calls[-1] == ("hold", True)
        assert "engine HELD (n: one step, h: resume)" in app.status_text()
        await pilot.press("n", "n")
        assert controller.calls[-2:] == [("step_once",), ("step_once",)]
        await pilot.press("h")
        assert controller.calls[-1] == ("hold", False) and "HELD" not in app.status_text()
        assert "h" in [key.key for key in app.query("FooterKey")]
    assert "`h` holds the engine" in CONCEPTS and "`n` then runs one step" in CONCEPTS
    # a replay has no engine: no `h` in its footer
    replay = KvtuiApp(source="r", clock=lambda: 0.0, frame_rate=None)
    async with replay.run_test(size=(100, 30)):
        assert "h" not in [key.key for key in replay.query("FooterKey")]


def _steps(feed: EventFeed, seen: list[dict], until, timeout: float = 30.0) -> int:
    """Drain the feed into `seen` until `until(seen)` or the timeout; the number of step events seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += [item.event for item in feed.drain() if isinstance(item, FeedEvent)]
        if until(seen):
            break
        time.sleep(0.02)
    return sum(ev["type"] == "step" for ev in seen)


def test_a_held_worker_runs_exactly_the_steps_asked_for():
    def engine():
        return Engine.from_model(tiny_model("llama-gqa"), config=EngineConfig(device="cpu", num_blocks=32))

    feed = EventFeed()
    worker = EngineWorker(feed, "tiny", None, engine_factory=engine)
    worker.start()
    seen: list[dict] = []
    try:
        worker.hold(True)
        worker.submit([5, 6, 7, 8, 9], max_tokens=8)
        _steps(feed, seen, lambda s: any(ev["type"] == "request_arrived" for ev in s))
        # held: the request waits, no step runs
        time.sleep(0.3)
        assert _steps(feed, seen, lambda s: False, timeout=0.1) == 0
        worker.step_once()
        worker.step_once()
        assert _steps(feed, seen, lambda s: sum(ev["type"] == "step" for ev in s) >= 2) == 2
        time.sleep(0.3)
        assert _steps(feed, seen, lambda s: False, timeout=0.1) == 2
        worker.hold(False)
        _steps(feed, seen, lambda s: any(ev["type"] == "request_finished" for ev in s))
        assert any(ev["type"] == "request_finished" for ev in seen)
    finally:
        worker.stop()
