"""The metrics reducer (kvtui/state/metrics.py): hit-rate rows and the append-only `History`."""

from __future__ import annotations

from kvtui.state import History, replay
from tests.kvtui.state.reducer_events import HEADER, Events


def test_hit_rates_rows_keep_cumulative_and_window_rates():
    e = Events()
    e(
        "hit_rates",
        token_hit_rate=0.5,
        request_hit_rate=1.0,
        block_hit_rate=0.25,
        window={"token_hit_rate": 0.4, "request_hit_rate": 0.5, "block_hit_rate": 0.2, "n": 2},
    )
    s = replay(HEADER, e.out)
    assert s.hit_rates is e.out[0]
    assert s.history_hits() == [(e.out[0]["t"], 0.5, 1.0, 0.25, 0.4, 0.5, 0.2, 0)]


def test_history_is_shared_and_reapplying_events_appends_nothing(small_trace):
    header, events = small_trace
    history = History()
    s = replay(header, events, history)
    rows = (len(history.steps), len(history.hits), len(history.itl))
    assert rows == (s.n_steps, s.n_hits, s.n_itl) and min(rows) > 0
    half = replay(header, events[: len(events) // 2], history)
    assert (len(history.steps), len(history.hits), len(history.itl)) == rows
    assert half.history_steps() == history.steps[: half.n_steps] and half.n_steps < s.n_steps
