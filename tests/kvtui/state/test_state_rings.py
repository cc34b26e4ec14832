"""The rings reducer (kvtui/state/rings.py): sliding-window slots."""

from __future__ import annotations

import pytest

from kvtui.state import replay
from tests.kvtui.state.reducer_events import HEADER, Events


def test_ring_slots_are_position_mod_window():
    e = Events()
    e("ring_write", request_id="a", group=0, window=4, start=0, end=6, evicted=[0, 1])
    s = replay(HEADER, e.out)
    ring = s.rings[("a", 0)]
    assert ring.slots == [4, 5, 2, 3] and ring.head == 2
    e("ring_write", request_id="a", group=0, window=4, start=6, end=7, evicted=[2])
    ring = replay(HEADER, e.out).rings[("a", 0)]
    assert ring.slots == [4, 5, 6, 3] and ring.head == 3 and ring.last_evicted == [2]


def test_a_ring_with_sinks_marks_its_sink_and_recent_slots():
    e = Events()
    e("ring_write", request_id="a", group=0, window=4, start=0, end=9, evicted=[], sink_tokens=2)
    ring = replay(HEADER, e.out).rings[("a", 0)]
    # slots 0-1 hold the sinks; the ring proper holds the last 4 positions at 2 + position mod 4
    assert ring.slots == [0, 1, 8, 5, 6, 7] and ring.end == 9
    assert [ring.role_of(p) for p in ring.slots] == ["sink", "sink"] + ["recent"] * 4
    assert ring.role_of(-1) == "empty"


def test_ring_kept_holds_exactly_the_kept_set_and_new_keys_take_freed_slots():
    e = Events()
    e("ring_kept", request_id="h", group=0, budget=4, recent=2, end=4, kept=[0, 1, 2, 3], layer=1, kv_head=0)
    ring = replay(HEADER, e.out).rings[("h", 0)]
    assert ring.slots == [0, 1, 2, 3] and ring.head == 3 and ring.layer == 1
    # the budget has just filled and nothing has gone: no key was kept for its attention yet
    assert [ring.role_of(p) for p in ring.slots] == ["recent"] * 4
    # 1 and 2 leave (least attention); 4 and 5 take their slots, lowest first
    e("ring_kept", request_id="h", group=0, budget=4, recent=2, end=6, kept=[0, 3, 4, 5])
    ring = replay(HEADER, e.out).rings[("h", 0)]
    assert ring.slots == [0, 4, 5, 3] and ring.head == 2
    assert ring.last_evicted == [1, 2] and ring.last_written == [4, 5] and ring.overwrites == 2
    # 0 and 3 are outside the recent window of 2 (positions 4, 5): heavy hitters
    assert [ring.role_of(p) for p in ring.slots] == ["heavy", "recent", "recent", "heavy"]


def test_a_ring_kept_beyond_its_budget_is_refused():
    e = Events()
    e("ring_kept", request_id="h", group=0, budget=2, recent=1, end=3, kept=[0, 1, 2])
    with pytest.raises(ValueError, match="3 positions kept in a budget of 2"):
        replay(HEADER, e.out)
