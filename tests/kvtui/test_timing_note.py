"""Why a trace's TTFT and TPOT are what they are: the Requests tab compares its decode steps with the roofline
the engine measured on the recording machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtui.app import KvtuiApp
from kvtui.state.roofline import Roofline, StepPoint
from kvtui.widgets.timeline import timing_note

pytestmark = pytest.mark.anyio
TRACES = Path(__file__).resolve().parents[2] / "fixtures" / "traces"


async def _note(name: str) -> str:
    path = str(TRACES / name)
    app = KvtuiApp(source=path, trace_path=path, open_interesting=True, frame_rate=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("2")
        return str(app.query_one("#timing-note").render())


async def test_a_trace_recorded_on_a_busy_machine_says_so():
    # TTFT 6-12 s and TPOT about 5 s for a 135M model: decode steps 334x the weights' read time
    note = await _note("shared_system_8users.jsonl")
    assert "5.35s median = 334x this machine's 16.0ms floor" in note
    assert "busy with other work while recording, so TTFT/TPOT are the recording's" in note
    note = await _note("edit_series.jsonl")
    assert "9x this machine's 25.7ms floor" in note and "busy" not in note


def test_without_a_roofline_event_the_times_are_as_recorded():
    points = [StepPoint(i, i, 1, 0, 1, 0.02) for i in range(3)]
    assert (
        timing_note(points, None)
        == "decode steps took 20.0ms (median) as recorded; no roofline event to compare with"
    )
    assert timing_note([], Roofline(1e9, 1e9, 10**6, 10**6)) == ""
