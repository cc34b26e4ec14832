"""Where a replay opens and which request it selects, so the first screen already shows something.

A new user who opens a trace should not face an empty pool at event 0. The replay opens at the end of the
trace (the cache as the run left it: what stayed cached, the whole tree), unless the end holds nothing (every
block freed, e.g. prefix cache off): then at the engine step with the most blocks in use. A `kvtui sinks`
trace holds no blocks at all (its caches are rings) and opens at its end, the whole text read. The selected
request is the most telling one: the last edited request, else the last one that reused part of its prompt or
missed on a divergent token, else the last to arrive.
"""

from __future__ import annotations

from bisect import bisect_right

from kvtui.state import CacheState
from kvtui.state.timeline import Timeline


def opening_cursor(timeline: Timeline) -> int:
    end = len(timeline)
    tip = timeline.tip
    if tip.n_used or tip.n_cached or not timeline.history.steps or timeline.header.get("kind") == "sinks":
        return end
    # (t, step, used, cached, free, num_tokens, duration, seq)
    steps = timeline.history.steps
    best = max(range(len(steps)), key=lambda i: (steps[i][2] + steps[i][3], -i))
    seq = steps[best][7]
    # the cursor just after that step event: events are seq-ordered, so find it by seq
    return bisect_right(timeline.events, seq, 0, end, key=lambda event: event["seq"])


def interesting_request(state: CacheState | None) -> str | None:
    if state is None or not state.order:
        return None

    def score(rid: str) -> tuple:
        req = state.requests[rid]
        match = req.match or {}
        partial = bool(match.get("matched_tokens")) or match.get("reason") in ("divergent", "evicted", "salt")
        last_edit = req.edits[-1]["seq"] if req.edits else -1
        return (last_edit, partial, req.ordinal)

    return max(state.order, key=score)
