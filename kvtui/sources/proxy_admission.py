"""The live proxy at admission: when vLLM admits a forwarded request, and what it serves it from its cache then.

A request that waits in vLLM's queue is served what the cache holds when it is admitted, which no view at its
arrival can know (the proxy's prediction at arrival, `predicted_cached`, stays beside). vLLM admits a request
in a step and stores its new prompt blocks in that step: the step's KV-event batch carries one run of blocks
per request (one BlockStored), so the first run that is a prefix block of a waiting request's prompt (the
earliest forwarded, as vLLM admits first come, first served) is its admission. What it was served then:

    the longest prefix of its whole prompt blocks (never the last token) held before the step, or stored in
    the step by a run before its own (a request scheduled earlier in the step, whose blocks are cached once
    allocated), and not removed in the step (a block the request used cannot be evicted in that step)

A request whose admission stored nothing (its whole blocks were all cached, or it fills none) is judged when
its answer comes: its prefix in the cache then. Until then it is `queued`. The record gains `admitted` (the
engine's time of the step, or null), `predicted_at_admission` and `agrees_at_admission`. Thread-safe: the
attach thread feeds batches, the proxy's loop registers and settles requests.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass

from engine.core.hashing import block_hashes
from kvtui.sources.proxy_events import batch_line
from kvtui.sources.server_view import ServerView


@dataclass
class _Waiting:
    order: int
    # the prompt's whole-block keys, and how many of them vLLM may serve (never the last token)
    keys: list[str]
    servable: int
    block_size: int
    admitted: float | None = None
    predicted: int | None = None


class AdmissionWatch:
    def __init__(self):
        self.view = ServerView()
        self.lock = threading.Lock()
        self.requests: dict[str, _Waiting] = {}
        # prompt block key -> request ids still waiting with it as a block
        self._index: dict[str, list[str]] = {}
        self._order = 0
        self._steps = 0

    def forwarded(self, request_id: str, ids: list[int], salt: str | None, block_size: int) -> None:
        """The proxy forwarded the request (its prompt ids as vLLM sees them)."""
        keys = block_hashes(ids, block_size, salt)[0]
        with self.lock:
            self._order += 1
            self.requests[request_id] = _Waiting(
                self._order, keys, max(len(ids) - 1, 0) // block_size, block_size
            )
            for key in keys:
                self._index.setdefault(key, []).append(request_id)

    def queued(self) -> list[str]:
        """Requests forwarded and not yet seen admitted, in the order they were forwarded."""
        with self.lock:
            waiting = [(w.order, rid) for rid, w in self.requests.items() if w.admitted is None]
        return [rid for _, rid in sorted(waiting)]

    def on_batch(self, events) -> None:
        """A batch listener of the attach sink: one published step."""
        line = batch_line(events, time.time())
        if line is not None:
            self.fold(line)

    def fold(self, line: dict) -> None:
        """One batch as the events file keeps it (proxy_events.py)."""
        with self.lock:
            step = self.view.fold(line, self._steps, 0.0)
            self._steps += 1
            stored, removed = Counter(step.stored), Counter(step.removed)
            gone = set(step.removed)
            resident = self.view.resident
            earlier: set[str] = set()
            for run in step.runs:
                rid = self._first_waiting(run[0])
                if rid is not None:
                    w = self.requests[rid]
                    held = 0
                    for key in w.keys[: w.servable]:
                        before = resident.get(key, 0) - stored[key] + removed[key] > 0
                        if key in gone or not (before or key in earlier):
                            break
                        held += 1
                    w.admitted, w.predicted = line["ts"], held * w.block_size
                earlier.update(run)

    def _first_waiting(self, key: str) -> str | None:
        best = None
        for rid in self._index.get(key, ()):
            w = self.requests.get(rid)
            if w is not None and w.admitted is None and (best is None or w.order < self.requests[best].order):
                best = rid
        return best

    def settle(self, request_id: str, cached: int | None) -> dict:
        """The record's fields once answered (`cached`: vLLM's cached tokens); the request is forgotten."""
        with self.lock:
            w = self.requests.pop(request_id, None)
            if w is None:
                return {}
            for key in w.keys:
                owners = self._index.get(key)
                if owners is not None:
                    owners.remove(request_id)
                    if not owners:
                        del self._index[key]
            if w.predicted is None:
                held = 0
                for key in w.keys[: w.servable]:
                    if self.view.resident.get(key, 0) <= 0:
                        break
                    held += 1
                w.predicted = held * w.block_size
        out = {"admitted": w.admitted, "predicted_at_admission": w.predicted}
        if cached is not None:
            out["agrees_at_admission"] = w.predicted == cached
        return out
