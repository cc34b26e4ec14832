"""Replay playback: the speed keys change how long a recorded trace takes to play on screen."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.trace import read_trace
from kvtui.app import KvtuiApp
from kvtui.state.timeline import Timeline

pytestmark = pytest.mark.anyio
TRACE = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "shared_system_8users.jsonl"


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


async def _screen_seconds_to_play(parsed, speed_keys: list[str], dt: float) -> float:
    clock = FakeClock()
    app = KvtuiApp(Timeline(parsed.header, parsed.events), source="t", clock=clock, frame_rate=None)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press(*speed_keys, "space")
        assert app.playing and app.cursor == 0
        while app.playing:
            clock.now += dt
            app.tick()
            assert clock.now < 1000
        assert app.cursor == len(app.timeline)
        return clock.now


async def test_slower_speed_plays_longer_and_gaps_are_shortened_not_removed():
    parsed = read_trace(TRACE, strict=True)
    # 123 s of trace, decode steps about 5 s apart (recorded on a busy machine)
    assert parsed.events[-1]["t"] > 120
    at_1x = await _screen_seconds_to_play(parsed, [], 0.25)
    at_tenth = await _screen_seconds_to_play(parsed, ["minus"] * 3, 1.0)
    # each quiet stretch keeps a second of trace time: about 23 s at 1x, ten times that at 0.1x
    assert 15 < at_1x < 40, at_1x
    assert at_tenth > 8 * at_1x, (at_1x, at_tenth)
