"""The twin on the server's recorded clock: a proxy log's requests run through the engine's cache manager
(engine/core/kv_cache.py: lookup, allocation, the prefix tree and its eviction) at the moments the log recorded,
instead of on the simulator's cost clock.

What a loaded server's cache holds depends on when each request held, freed and evicted blocks, which is the
server's timing, not a cost model's. Here the server's own times drive the cache, and the twin's scheduler
decides only what vLLM's decides from them:

    arrive   when the server got it (the log's `forwarded`), the request joins the queue; the queue is
             admitted first come, first served while the head's prompt finds blocks (vLLM's queue: one that
             does not fit holds back those behind it)
    admit    the prefix lookup (the hit), then every prompt block allocated and cached at once, before the next
             lookup (vLLM caches a block when it allocates it)
    decode   each recorded output token fed at the time it came (a stream's first token and time per token;
             an answer read whole: its tokens spread evenly from its admission to its end): its block
             allocated, cached once full; with no block left, the last admitted request is preempted (its
             blocks freed, back to the head of the queue), as vLLM does
    finish   at the recorded end of the answer: its blocks freed, last block first (the manager's LRU order)

vLLM counts a request's cached tokens at its first admission, so the hits here are the first lookup's, also for
a request preempted later. Torch-free.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from engine.core.kv_cache import KVCacheManager
from engine.core.request import Request, SamplingParams
from kvtui.whatif.causes import MissLedger
from kvtui.whatif.run_sink import RunSink
from kvtui.whatif.simulate import SHAPE

# at one instant: a token fed before its own request's finish, both before an arrival
FEED, FINISH, ARRIVE = 0, 1, 2


@dataclass(eq=False)
class _Live:
    item: object
    order: int
    req: Request | None = None
    # output tokens the server had produced by now (fed, or waiting for a readmission)
    produced: int = 1
    admitted: bool = False
    finished: bool = False
    # its whole prompt computed (step_clock.py prefills in chunks)
    prefilled: bool = False
    # its schedule's generation (step_clock.py schedules a preempted request's tokens again)
    gen: int = 0


def on_the_clock(requests) -> list | None:
    """The requests the recorded clock replays: those with their answer's times and output ids; one without
    and without the server's cached tokens never ran as far as the log says (a refused request) and is left
    out. None when a request the server answered has no times (not a proxy log): no recorded clock."""
    timed = [r for r in requests if r.timeline is not None and r.output_token_ids]
    if not timed or any(r.server_cached is not None for r in requests if r.timeline is None):
        return None
    return timed


def token_times(arrival: float, timeline: tuple, n: int, admitted: float) -> list[float]:
    """When each of the n output tokens came: a stream's first token and then evenly to its last; an answer
    read whole (no first-token time), evenly from its admission (a queued request produced nothing) to its end."""
    first, end = timeline
    if first is None:
        stop = max(arrival + end, admitted)
        return [admitted + (stop - admitted) * (j + 1) / n for j in range(n)]
    if n == 1:
        return [arrival + first]
    return [arrival + first + (end - first) * j / (n - 1) for j in range(n)]


class TimelineReplay:
    def __init__(self, config):
        self.ledger = MissLedger(config.block_size)
        self.now = 0.0
        sink = RunSink(clock=lambda: self.now)
        self.manager = KVCacheManager(SHAPE, config.engine_config(), sink, None, cache_generated=True)
        self.live: dict[str, _Live] = {}
        sink.listeners.append(lambda e: self.ledger.on_event(e, self._prompt_of))
        self.events: list[tuple] = []
        self.waiting: list[_Live] = []
        # admitted, in admission order (the preemption victim is the last)
        self.running: list[_Live] = []
        # request id -> when it was first admitted; the preempted, in order
        self.admitted_at: dict[str, float] = {}
        self.preempted: list[str] = []

    def run(self, requests) -> dict:
        """request id -> (hit tokens at the first admission, the misses' causes)."""
        play(self, requests)
        return {rid: (r.first_matched, dict(r.causes)) for rid, r in self.ledger.requests.items()}

    def _prompt_of(self, request_id: str) -> tuple:
        req = self.live[request_id].req
        return req.prompt_token_ids, req.cache_salt, req.block_keys, req.block_contents

    def _head_of_queue(self) -> _Live | None:
        """The first waiting request that could ever be admitted, its `Request` made (the finished leave the
        queue, and so do those larger than the pool, counted as such); None when nobody waits."""
        while self.waiting:
            entry = self.waiting[0]
            item = entry.item
            if entry.finished:
                self.waiting.pop(0)
                continue
            output = item.output_token_ids
            if len(item.prompt) + len(output) > self.manager.capacity_tokens:
                self.ledger.too_large(item.request_id, len(item.prompt))
                entry.finished = True
                self.waiting.pop(0)
                continue
            if entry.req is None:
                sampling = SamplingParams(max_tokens=len(output))
                entry.req = Request(item.request_id, item.prompt, sampling, self.now, item.cache_salt)
            return entry
        return None

    def _admit_waiting(self) -> None:
        m = self.manager
        while (entry := self._head_of_queue()) is not None:
            item, req = entry.item, entry.req
            output = item.output_token_ids
            first = not entry.admitted
            # a readmission brings back what it had produced (its K/V computed again)
            need = len(item.prompt) + (0 if first else entry.produced - 1)
            if not m.can_allocate(m.pool.blocks_for(need)):
                return
            self.waiting.pop(0)
            self.running.append(entry)
            entry.admitted = True
            m.admit(req)
            m.allocate_slots(req, need - req.num_computed)
            req.num_computed = need
            if first:
                self.admitted_at[item.request_id] = self.now
                req.output_token_ids.append(output[0])
                self._schedule(entry)
            m.cache_blocks(req)

    def _schedule(self, entry: _Live) -> None:
        schedule_tokens(self, entry)

    def _feed(self, entry: _Live, j: int) -> None:
        m = self.manager
        entry.produced = j + 1
        if entry not in self.running:
            # preempted: the token waits for its readmission
            entry.req.output_token_ids.append(entry.item.output_token_ids[j])
            return
        req = entry.req
        while not m.can_append(req, 1):
            victim = self.running[-1]
            self._preempt(victim)
            if victim is entry:
                req.output_token_ids.append(entry.item.output_token_ids[j])
                return
        m.allocate_slots(req, 1)
        req.num_computed += 1
        req.output_token_ids.append(entry.item.output_token_ids[j])
        m.cache_blocks(req)

    def _preempt(self, entry: _Live) -> None:
        self.preempted.append(entry.item.request_id)
        self.manager.free(entry.req)
        entry.req.num_computed = 0
        self.running.remove(entry)
        self.waiting.insert(0, entry)

    def _finish(self, entry: _Live) -> None:
        entry.finished = True
        if entry in self.running:
            self.manager.free(entry.req)
            self.running.remove(entry)


def play(replay, requests) -> None:
    """The recorded clock: each request arrives at its time, its tokens are fed at theirs and it finishes at its
    last; after each, the waiting are admitted as room allows (`replay`: a TimelineReplay, or the hybrid twin's
    replay, hybrid_timeline.py)."""
    for order, item in enumerate(requests):
        heapq.heappush(replay.events, (item.arrival, ARRIVE, order, 0, item))
    while replay.events:
        t, kind, order, j, item = heapq.heappop(replay.events)
        replay.now = t
        if kind == ARRIVE:
            replay.live[item.request_id] = _Live(item, order)
            replay.waiting.append(replay.live[item.request_id])
        elif kind == FEED:
            replay._feed(replay.live[item.request_id], j)
        else:
            replay._finish(replay.live[item.request_id])
        replay._admit_waiting()


def schedule_tokens(replay, entry: _Live) -> None:
    """An admitted request's later tokens and its end, at their recorded times (none before now)."""
    item = entry.item
    output = item.output_token_ids
    times = token_times(item.arrival, item.timeline, len(output), replay.now)
    # feeding token j-1 (computing its K/V) is the step that produced token j
    for j in range(1, len(output)):
        heapq.heappush(replay.events, (max(times[j], replay.now), FEED, entry.order, j, item))
    heapq.heappush(replay.events, (max(times[-1], replay.now), FINISH, entry.order, 0, item))
