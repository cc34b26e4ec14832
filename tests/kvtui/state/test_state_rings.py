"""The rings reducer (kvtui/state/rings.py): sliding-window slots."""

from __future__ import annotations

from reducer_events import HEADER, Events

from kvtui.state import replay


def test_ring_slots_are_position_mod_window():
    e = Events()
    e("ring_write", request_id="a", group=0, window=4, start=0, end=6, evicted=[0, 1])
    s = replay(HEADER, e.out)
    ring = s.rings[("a", 0)]
    assert ring.slots == [4, 5, 2, 3] and ring.head == 2
    e("ring_write", request_id="a", group=0, window=4, start=6, end=7, evicted=[2])
    ring = replay(HEADER, e.out).rings[("a", 0)]
    assert ring.slots == [4, 5, 6, 3] and ring.head == 3 and ring.last_evicted == [2]
