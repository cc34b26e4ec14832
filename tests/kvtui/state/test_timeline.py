"""Keyframes: seeking equals a straight replay."""

from __future__ import annotations

import random

from kvtui.state import replay, state_fingerprint
from kvtui.state.timeline import Timeline


def test_tip_equals_straight_replay(medium_trace):
    header, events = medium_trace
    tl = Timeline(header, events, keyframe_every=64)
    assert state_fingerprint(tl.tip) == state_fingerprint(replay(header, events))


def test_incremental_extend_equals_one_batch(medium_trace):
    header, events = medium_trace
    tl = Timeline(header, keyframe_every=100)
    # live mode: batches of arbitrary size
    for i in range(0, len(events), 37):
        tl.extend(events[i : i + 37])
    assert state_fingerprint(tl.tip) == state_fingerprint(replay(header, events))


def test_seek_equals_straight_replay(medium_trace):
    header, events = medium_trace
    tl = Timeline(header, events, keyframe_every=50)
    rng = random.Random(3)
    points = [0, 1, 49, 50, 51, len(events)] + [rng.randrange(len(events)) for _ in range(12)]
    for k in points:
        assert state_fingerprint(tl.state_at(k)) == state_fingerprint(replay(header, events[:k])), k


def test_seek_back_and_forth_does_not_disturb_keyframes(small_trace):
    header, events = small_trace
    tl = Timeline(header, events, keyframe_every=32)
    a = tl.state_at(100)
    # mutate the returned state
    a.apply_all(events[100:])
    assert state_fingerprint(tl.state_at(100)) == state_fingerprint(replay(header, events[:100]))


def test_markers(small_trace):
    header, events = small_trace
    tl = Timeline(header, events)
    arrivals = tl.markers["arrival"]
    assert len(arrivals) == sum(ev["type"] == "request_arrived" for ev in events)
    assert events[arrivals[0] - 1]["type"] == "request_arrived"
    assert tl.next_marker("arrival", 0) == arrivals[0]
    assert tl.next_marker("arrival", arrivals[0]) == arrivals[1]
    assert tl.prev_marker("arrival", arrivals[1]) == arrivals[0]
    assert tl.next_marker("arrival", len(events)) is None
    assert tl.markers["edit"] and tl.markers["miss"]
