"""Continuous batching with chunked prefill and preemption.

Each step: running requests first (oldest first; a decode takes 1 token, an unfinished prefill takes a chunk),
then waiting requests are admitted in arrival order while the token budget (`max_batched_tokens`) and the
pool allow. Requests join and leave only at step boundaries. When a running request needs a block and none
is free (or evictable), the most recently admitted running request is preempted: its blocks go back to the
pool (the full ones it computed stay cached in the prefix tree), and when readmitted it matches the cache like
any prompt and recomputes the rest, so its tokens stay exact. As in vLLM, a step that preempted admits nobody
(the victim would come straight back and be preempted again), and a victim already scheduled in this step
gives its tokens back to the step's budget. A waiting request may hold blocks too (an edit re-attaches a
finished request's prefix): when a step can place nothing, the newest such request gives its blocks back the
same way, so the blocks it holds never starve the requests before it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.core.kv_cache import KVCacheManager
from engine.core.request import Request, Status
from engine.trace import TraceSink


@dataclass
class ScheduledChunk:
    request: Request
    # first position to compute
    start: int
    num_tokens: int


@dataclass
class ScheduledStep:
    index: int
    chunks: list[ScheduledChunk]
    # a decode computes the last token of a request that has generated: classified before a token is added
    decodes: list[bool]
    # the trace clock when the step was scheduled
    started: float
    # window layers' snapshot saves and drops the step's commit decided, for the worker to apply
    ring_ops: list = field(default_factory=list)
    # running decodes that take their token outside the chunks, after them (`EngineCore.append_quiet`)
    set_aside: list[Request] = field(default_factory=list)

    @property
    def num_decode(self) -> int:
        return sum(self.decodes)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks) - self.num_decode


class Scheduler:
    def __init__(self, cache: KVCacheManager, trace: TraceSink, max_batched_tokens: int, max_num_seqs: int):
        if max_batched_tokens < 1:
            raise ValueError("max_batched_tokens must be at least 1")
        # the one door to blocks, prefix tree and rings (engine/core/kv_cache.py)
        self.cache = cache
        self.trace = trace
        self.max_batched_tokens = max_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._admissions = 0
        # this step preempted someone: admit nobody
        self._preempted = False
        # tokens of victims that were already scheduled in this step
        self._refund = 0

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    @property
    def preempted_this_step(self) -> bool:
        """The last `schedule` preempted someone (and so admitted nobody): an empty step is not a dead end."""
        return self._preempted

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self, set_aside: Sequence[Request] = (), ids: set | None = None) -> list[ScheduledChunk]:
        """The step's chunks. `set_aside`: running decodes that take their token outside the chunks (the
        engine core appends them, `EngineCore.append_quiet`); each keeps one token of the budget and its
        sequence slot, and must pass `can_set_aside` first. `ids`: their `id`s, where the caller has them."""
        budget = self.max_batched_tokens - len(set_aside)
        chunks: list[ScheduledChunk] = []
        self._preempted, self._refund = False, 0
        # oldest first: `running` is in admission order (a request joins it at the end when admitted, with
        # the next admitted_order, and only ever leaves it); a copy, since a preemption below removes from it
        if set_aside:
            aside = ids if ids is not None else {id(r) for r in set_aside}
            order = [r for r in self.running if id(r) not in aside]
        else:
            order = list(self.running)
        for request in order:
            if budget == 0:
                break
            # preempted earlier in this loop
            if request.status is not Status.RUNNING:
                continue
            n = self._reserve(request, min(request.num_to_compute, budget), chunks)
            budget += self._refund
            self._refund = 0
            if n:
                chunks.append(ScheduledChunk(request, request.num_computed, n))
                budget -= n
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs and not self._preempted:
            request = self.waiting[0]
            if not self.cache.can_admit(request, budget):
                break
            self.waiting.popleft()
            self._admit(request)
            n = self._reserve(request, min(request.num_to_compute, budget), chunks, may_preempt=False)
            if n == 0:
                break
            chunks.append(ScheduledChunk(request, request.num_computed, n))
            budget -= n
        if set_aside and self._preempted:
            raise RuntimeError("a step with rows set aside preempted: can_set_aside let it through")
        if not chunks and not set_aside and not self._preempted:
            # nothing could be placed: the blocks may be held by waiting requests (an edited one keeps its
            # prefix while it waits); one gives them back and the next step places what now fits
            self._release_waiting()
        return chunks

    def can_set_aside(self, rows: Sequence[Request], ids: set | None = None) -> bool:
        """Setting `rows` aside (running decodes whose next token lands in a slot they hold, unshared) changes
        nothing `schedule` decides; a query. It holds when
        - the budget: walking the running requests oldest first, every row set aside still gets its token (no
          older request takes the rest of the budget), so the others get what they would have got;
        - the pool: the others need at most the blocks that are free or evictable now, so no one is preempted
          (the victim is the newest running request, which may be one set aside);
        - no window layers: their rings begin with every chunk, their paged groups free blocks in it.
        Admission sees the same budget left and the same sequences running either way. `ids`: the rows' `id`s,
        where the caller has them."""
        if self.cache.rings.enabled or self.cache.groups.enabled:
            return False
        aside = ids if ids is not None else {id(r) for r in rows}
        budget = self.max_batched_tokens
        need = 0
        left = len(rows)
        # oldest first: `running` is in admission order (see `schedule`)
        for req in self.running:
            if id(req) in aside:
                if budget < 1:
                    return False
                budget -= 1
                left -= 1
                continue
            if left and req.num_to_compute > budget - left:
                # it would take budget that a younger row set aside needs for its token
                return False
            n = min(req.num_to_compute, budget)
            need += max(0, self.cache.blocks_to_append(req, n))
            budget -= n
        return not need or self.cache.can_allocate(need)

    def adopt(self, request: Request) -> None:
        """Add an already running request (a fork that shares its parent's blocks) to the batch."""
        request.status = Status.RUNNING
        request.admitted_order = self._admissions
        self._admissions += 1
        self.running.append(request)
        self.trace.emit("request_scheduled", request_id=request.request_id, num_computed=request.num_computed)

    def _admit(self, request: Request) -> None:
        request.status = Status.RUNNING
        request.admitted_order = self._admissions
        self._admissions += 1
        self.running.append(request)
        # an edited finished request re-attached its cached prefix at the edit
        if not request.attached:
            self.cache.admit(request)
        self.trace.emit("request_scheduled", request_id=request.request_id, num_computed=request.num_computed)

    def _reserve(
        self, request: Request, n: int, scheduled: list[ScheduledChunk], may_preempt: bool = True
    ) -> int:
        """Make room in the block table for n more tokens; shrink n to what fits. Returns tokens reserved."""
        while not self.cache.can_append(request, n):
            fit = self.cache.tokens_that_fit(request)
            if fit > 0 and (request.in_prefill or not may_preempt):
                # a prefill chunk shrinks to what fits instead of preempting anyone
                n = min(n, fit)
                continue
            if not may_preempt:
                return 0
            victim = self._preemption_victim(scheduled)
            self.preempt(victim)
            if victim is request:
                return 0
        self.cache.allocate_slots(request, n)
        return n

    def _preemption_victim(self, scheduled: list[ScheduledChunk]) -> Request:
        victim = max(self.running, key=lambda r: r.admitted_order)
        for chunk in scheduled:
            if chunk.request is victim:
                scheduled.remove(chunk)
                self._refund += chunk.num_tokens
                break
        return victim

    def preempt(self, request: Request) -> None:
        self._give_back(request)
        request.status = Status.WAITING
        self.running.remove(request)
        self.waiting.appendleft(request)

    def _release_waiting(self) -> None:
        """The newest waiting request that holds blocks gives them back, as a preemption would (the full
        ones it computed stay cached, and it matches the cache again when admitted)."""
        holder = next((r for r in reversed(self.waiting) if r.attached), None)
        if holder is not None:
            self._give_back(holder)

    def _give_back(self, request: Request) -> None:
        """A preemption's release: the request's blocks go back (computed full ones stay cached)."""
        self._preempted = True
        self.cache.free(request)
        self.trace.emit("request_preempted", request_id=request.request_id, num_tokens=request.num_tokens)
        # num_cached stays: it counts what the cache served at first admission
        request.num_computed = 0

    def finish(self, request: Request) -> None:
        """Take a request out of the batch (it finished) or out of the queue (aborted before admission)."""
        # by identity: a Request compares by value, field by field
        running = next((i for i, r in enumerate(self.running) if r is request), None)
        if running is not None:
            del self.running[running]
        else:
            waiting = next((i for i, r in enumerate(self.waiting) if r is request), None)
            if waiting is not None:
                del self.waiting[waiting]
        request.status = Status.FINISHED
