"""The rings reducer: the sliding-window ring of each request and window-layer group (slot = position mod W,
after any attention-sink slots), plus the window layers' restarts and attention-sink divergence per request.

Each slot has a role: a sink (positions < S, kept forever), recent (inside the window of the newest position), or
a heavy hitter (H2O, `kvtui sinks --trace`: kept for its accumulated attention, outside the recent window).
A heavy-hitter cache (`ring_kept`) is a set of positions, not position mod W: a key that enters takes the slot of
one that left, the lowest free slot first, so a slot keeps its key for as long as the cache does.

Rings are copied on write, like requests and radix nodes.
"""

from __future__ import annotations

import copy as _copy
from dataclasses import dataclass, field


@dataclass(slots=True)
class Ring:
    """A sliding-window ring of one request and one window-layer group: slot = position mod W."""

    request_id: str
    group: int
    window: int
    # position held by each slot, -1 = empty
    slots: list[int]
    # next slot to be written
    head: int = 0
    writes: int = 0
    last_written: list[int] = field(default_factory=list)
    last_evicted: list[int] = field(default_factory=list)
    overwrites: int = 0
    owner: int = 0
    # attention sinks: positions < sinks stay in slots 0..sinks-1; the ring proper follows
    sinks: int = 0
    # one past the newest position written
    end: int = 0
    # a heavy-hitter cache (ring_kept): its recent window; None = a ring, where every non-sink slot is recent
    recent: int | None = None
    # a heavy-hitter cache's layer and KV head (one cache each in H2O)
    layer: int | None = None

    def slot_of(self, position: int) -> int:
        return position if position < self.sinks else self.sinks + position % self.window

    def role_of(self, position: int) -> str:
        """empty, sink, recent or heavy: why `position` (a slot's content, -1 = none) is in the cache."""
        if position < 0:
            return "empty"
        if position < self.sinks:
            return "sink"
        if self.recent is None or position >= self.end - self.recent:
            return "recent"
        # until the budget fills nothing has been dropped, so no key was kept for its attention yet
        if self.end <= len(self.slots):
            return "recent"
        return "heavy"

    def copy(self) -> Ring:
        new = _copy.copy(self)
        new.slots = list(self.slots)
        new.last_written = list(self.last_written)
        new.last_evicted = list(self.last_evicted)
        return new


class RingsReducer:
    """The window-layer part of `CacheState`: ring_write, ring_kept, ring_resume and sink_divergence events."""

    def _init_rings(self) -> None:
        self.rings: dict[tuple[str, int], Ring] = {}

    def _snapshot_rings(self, new) -> None:
        new.rings = dict(self.rings)

    def _on_ring_write(self, ev: dict) -> None:
        key = (ev["request_id"], ev["group"])
        window, sinks = ev["window"], ev.get("sink_tokens") or 0
        ring = self.rings.get(key)
        if ring is None or ring.window != window or ring.sinks != sinks:
            ring = self.rings[key] = Ring(
                ev["request_id"], ev["group"], window, [-1] * (sinks + window), owner=self._gen, sinks=sinks
            )
        elif ring.owner != self._gen:
            ring = self.rings[key] = ring.copy()
            ring.owner = self._gen
        start, end = ev["start"], ev["end"]
        # a fresh ring (first prefill, or a restart from the start): nothing in it is valid
        if start == 0:
            ring.slots = [-1] * len(ring.slots)
        slots = ring.slots
        written = [p for p in range(start, min(end, sinks))] + list(
            range(max(start, sinks, end - window), end)
        )
        for pos in written:
            slot = ring.slot_of(pos)
            if slots[slot] >= 0 and slots[slot] != pos:
                ring.overwrites += 1
            slots[slot] = pos
        ring.head = ring.slot_of(end) if end >= sinks else end
        ring.end = end
        ring.writes += end - start
        ring.last_written = list(range(start, end))
        ring.last_evicted = list(ev["evicted"])

    # --- window layers restarting (after an edit or a hit) and attention-sink divergence: kept on the request
    def _on_ring_resume(self, ev: dict) -> None:
        """The rings now hold exactly the window before `position` (and the sinks): what the restart kept."""
        rid, position = ev["request_id"], ev["position"]
        req = self._req(rid)
        if req is not None:
            req.ring_resume = ev
        for group, (window, sinks) in enumerate(self._ring_groups()):
            key = (rid, group)
            ring = self.rings.get(key)
            if ring is None or ring.window != window or ring.sinks != sinks:
                ring = self.rings[key] = Ring(
                    rid, group, window, [-1] * (sinks + window), owner=self._gen, sinks=sinks
                )
            elif ring.owner != self._gen:
                ring = self.rings[key] = ring.copy()
                ring.owner = self._gen
            ring.slots = [-1] * len(ring.slots)
            for pos in [*range(min(sinks, position)), *range(max(sinks, position - window), position)]:
                ring.slots[ring.slot_of(pos)] = pos
            ring.head = ring.slot_of(position) if position >= sinks else position
            ring.end = position

    def _on_ring_kept(self, ev: dict) -> None:
        """A heavy-hitter cache now holds exactly `kept`: positions gone free their slots, new ones fill them."""
        key = (ev["request_id"], ev["group"])
        budget, end = ev["budget"], ev["end"]
        ring = self.rings.get(key)
        if ring is None or ring.window != budget or ring.recent is None:
            ring = self.rings[key] = Ring(
                ev["request_id"], ev["group"], budget, [-1] * budget, owner=self._gen, recent=ev["recent"]
            )
        elif ring.owner != self._gen:
            ring = self.rings[key] = ring.copy()
            ring.owner = self._gen
        kept = set(ev["kept"])
        if len(kept) > budget:
            raise ValueError(f"ring_kept: {len(kept)} positions kept in a budget of {budget}")
        slots = ring.slots
        gone = [p for p in slots if p >= 0 and p not in kept]
        free = [i for i, p in enumerate(slots) if p < 0 or p not in kept]
        held = set(slots)
        new = [p for p in ev["kept"] if p not in held]
        for i in free:
            slots[i] = -1
        for slot, pos in zip(free, new):
            slots[slot] = pos
        # the head: the slot of the newest key written
        if new:
            ring.head = slots.index(new[-1])
        ring.overwrites += len(gone)
        ring.writes += len(new)
        ring.last_written = new
        ring.last_evicted = sorted(gone)
        ring.recent, ring.end, ring.layer = ev["recent"], end, ev.get("layer")

    def _ring_groups(self) -> list[tuple[int, int]]:
        """(window, sink slots) of each ring group, in the engine's order: distinct windows by first layer."""
        model = self.header.get("model") or {}
        windows = [w for w in dict.fromkeys(model.get("windows") or ()) if w is not None]
        return [(w, int(model.get("sink_tokens") or 0)) for w in windows]

    def _on_sink_divergence(self, ev: dict) -> None:
        req = self._req(ev["request_id"])
        if req is not None:
            req.sink_divergence = ev
