"""`CacheState` (kvtui/state/cache_state.py): applying a whole trace, and snapshots."""

from __future__ import annotations

from engine.trace import validate_event
from kvtui.state import replay, state_fingerprint


def test_synthetic_events_are_valid(small_trace):
    header, events = small_trace
    assert all(validate_event(ev) is None for ev in events)
    assert [ev["seq"] for ev in events] == list(range(len(events)))


def test_snapshot_is_isolated(small_trace):
    header, events = small_trace
    half = len(events) // 2
    s = replay(header, events[:half])
    before = state_fingerprint(s)
    snap = s.snapshot()
    s.apply_all(events[half:])
    assert state_fingerprint(snap) == before
    snap.apply_all(events[half:])
    assert state_fingerprint(snap) == state_fingerprint(s)
