"""A trace held in memory with keyframes, so any point of it can be rebuilt fast.

`Timeline.extend(events)` folds events into the tip state and keeps a snapshot every `keyframe_every` events;
`state_at(k)` (the state after the first k events) copies the nearest keyframe at or before k and replays at
most `keyframe_every` events. Marker lists (arrivals, edits, evictions, misses, steps) let the UI jump to the
next interesting event and draw them on the scrubber.
"""

from __future__ import annotations

import gc
from bisect import bisect_left, bisect_right

from kvtui.state import CacheState, History

# Marker kinds the scrubber draws and the seek keys jump to. Values are cursor positions (events applied),
# so the event itself is visible at that position.
MARKER_KINDS = ("arrival", "edit", "eviction", "miss", "step", "preempt")


def is_miss(event: dict) -> bool:
    """A prefix match that left some prompt tokens to compute (a partial or total miss)."""
    return event["reason"] != "full_match" and event["matched_tokens"] < event["prompt_tokens"]


class Timeline:
    def __init__(self, header: dict, events=(), keyframe_every: int = 2048):
        self.header = header
        self.keyframe_every = keyframe_every
        self.history = History()
        self.events: list[dict] = []
        self.tip = CacheState(header, self.history)
        self._kf_index: list[int] = [0]
        self._kf_state: list[CacheState] = [self.tip.snapshot()]
        self.markers: dict[str, list[int]] = {kind: [] for kind in MARKER_KINDS}
        self._edit_pending: str | None = None
        self.extend(events)

    def __len__(self) -> int:
        return len(self.events)

    def extend(self, events) -> int:
        """Fold `events` into the tip; returns how many were added."""
        # The cyclic GC rescans every event dict held so far on each collection; a large ingest allocates
        # millions of objects and no cycles, so pause it (3x faster on 1M events).
        enabled = gc.isenabled()
        gc.disable()
        try:
            added = self._extend(events)
        finally:
            if enabled:
                gc.enable()
        if added > 10_000:
            # events live as long as the app: keep later collections from rescanning them
            gc.freeze()
        return added

    def _extend(self, events) -> int:
        tip, out, every = self.tip, self.events, self.keyframe_every
        markers = self.markers
        arrival, edit, eviction, miss, step, preempt = (markers[k] for k in MARKER_KINDS)
        added = 0
        for event in events:
            tip.apply(event)
            out.append(event)
            added += 1
            n = len(out)
            etype = event["type"]
            if etype == "step":
                step.append(n)
            elif etype == "request_arrived":
                arrival.append(n)
            elif etype == "block_evicted":
                eviction.append(n)
            elif etype == "edit":
                edit.append(n)
                self._edit_pending = event["request_id"]
            elif etype == "invalidate":
                # land on the invalidate that follows an edit, so the boundary it names is already visible
                if edit and self._edit_pending == event["request_id"]:
                    edit[-1] = n
                self._edit_pending = None
            elif etype == "prefix_match":
                if is_miss(event):
                    miss.append(n)
            elif etype == "request_preempted":
                preempt.append(n)
            if n % every == 0:
                self._kf_index.append(n)
                self._kf_state.append(tip.snapshot())
        return added

    def state_at(self, k: int) -> CacheState:
        """A fresh state after the first `k` events (the caller may apply more events to it)."""
        k = max(0, min(k, len(self.events)))
        i = bisect_right(self._kf_index, k) - 1
        enabled = gc.isenabled()
        # a seek allocates a burst of objects and frees no cycles
        gc.disable()
        try:
            state = self._kf_state[i].snapshot()
            start = self._kf_index[i]
            if k > start:
                state.apply_all(self.events[start:k])
        finally:
            if enabled:
                gc.enable()
        return state

    def next_marker(self, kind: str, cursor: int) -> int | None:
        marks = self.markers[kind]
        i = bisect_right(marks, cursor)
        return marks[i] if i < len(marks) else None

    def prev_marker(self, kind: str, cursor: int) -> int | None:
        marks = self.markers[kind]
        i = bisect_left(marks, cursor) - 1
        return marks[i] if i >= 0 else None

    def time_to_index(self, t: float, lo: int = 0) -> int:
        """Number of events with time <= t (events are time ordered)."""
        return bisect_right(self.events, t, lo, key=lambda event: event["t"])
