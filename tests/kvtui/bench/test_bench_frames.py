"""`kvtui bench frames`: a frame cheaper than the idle pause it is measured against is never a negative time."""

from __future__ import annotations

import itertools

from kvtui.bench import frames


class Clock:
    """Frames measured 1 ms, idle pauses 2 ms: the jitter that made the subtraction negative."""

    def __init__(self):
        self.now = 0.0
        self.steps = itertools.cycle([0.0, 0.001, 0.0, 0.002])

    def perf_counter(self):
        self.now += next(self.steps)
        return self.now


def test_a_live_frame_below_the_noise_is_not_negative(small_trace, monkeypatch):
    header, events = small_trace
    monkeypatch.setattr(frames, "time", Clock())
    ms = frames.bench_live_frame(header, events, per_frame=20, frames=3)
    assert ms >= 0.0
    assert frames.format_ms(ms) == "< 0.01 ms (within the noise of an idle pause)"
    assert frames.format_ms(1.234) == "1.23 ms"
