"""The twin on the server's own steps: a proxy log replayed with vLLM's KV-event batches beside it (the events
file, kvtui/sources/proxy_events.py), each batch one engine step (server_view.py).

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

import bisect
import dataclasses
import heapq

from engine.core.hashing import block_hashes
from kvtui.whatif.server_view import Step, server_steps
from kvtui.whatif.step_check import StepCheck
from kvtui.whatif.timeline import ARRIVE, FEED, FINISH, TimelineReplay, _Live, token_times

# after the arrivals and tokens of its own instant
CHECK = 3
# a token's time this close to a server step's is that step's (half a decode step on a loaded CPU server)
SNAP_S = 0.01
# a batch may be stamped this much before the proxy's record of a request's forwarding (two clocks)
SLACK_S = 0.002


class StepPlan:
    """When vLLM admitted each request, and by when each block-filling token was fed, from the steps."""

    def __init__(self, requests, steps: list[Step], block_size: int):
        self.steps = steps
        self.admit: dict[str, float] = {}
        # request id -> the step it was admitted at (None: inferred from its arrival)
        self.admit_step: dict[str, int | None] = {}
        # request id -> {output token index: the time it was fed by}
        self.deadlines: dict[str, dict[int, float]] = {}
        # twin key -> request ids whose prompt or output holds it (the check names them)
        self.owners: dict[str, list[str]] = {}
        # twin key -> its block's index in the token sequence
        self.position: dict[str, int] = {}
        prompt_of: dict[str, list] = {}
        self._keys: dict[str, list[str]] = {}
        for r in requests:
            tokens = list(r.prompt) + list(r.output_token_ids or ())
            keys, _ = block_hashes(tokens, block_size, r.cache_salt)
            self._keys[r.request_id] = keys
            for m, key in enumerate(keys):
                self.owners.setdefault(key, []).append(r.request_id)
                self.position[key] = m
                if (m + 1) * block_size <= len(r.prompt):
                    prompt_of.setdefault(key, []).append(r)
        self._times = [step.t for step in steps]
        self.finish = finishes(requests)
        self._admissions(requests, prompt_of)
        self._decode_deadlines(requests, block_size)

    def _admissions(self, requests, prompt_of: dict) -> None:
        order = {r.request_id: i for i, r in enumerate(requests)}
        waiting = {r.request_id for r in requests}
        # admitted no later than its first token came back (a whole answer: its end)
        answered = {
            r.request_id: r.arrival + (r.timeline[0] or r.timeline[1]) + 2 * SLACK_S for r in requests
        }
        for step in self.steps:
            # one run of blocks is one request's: the earliest waiting request whose prompt holds its first
            for key in (run[0] for run in step.runs):
                candidates = [
                    r
                    for r in prompt_of.get(key, ())
                    if r.request_id in waiting and r.arrival <= step.t + SLACK_S <= answered[r.request_id]
                ]
                if candidates:
                    first = min(candidates, key=lambda r: order[r.request_id])
                    waiting.discard(first.request_id)
                    self.admit[first.request_id] = step.t
                    self.admit_step[first.request_id] = step.index
        latest = float("-inf")
        for r in requests:
            if r.request_id in self.admit:
                latest = max(latest, self.admit[r.request_id])
            else:
                self.admit[r.request_id] = max(r.arrival, latest)
                self.admit_step[r.request_id] = None

    def snap(self, t: float) -> float:
        """A time within half a decode step of a server step: that step's (a token computed in it)."""
        i = bisect.bisect_left(self._times, t)
        near = [self._times[k] for k in (i - 1, i) if 0 <= k < len(self._times)]
        best = min(near, key=lambda x: abs(x - t), default=t)
        return best if abs(best - t) <= SNAP_S else t

    def _decode_deadlines(self, requests, block_size: int) -> None:
        stores: dict[str, list[float]] = {}
        for step in self.steps:
            for key in step.stored:
                stores.setdefault(key, []).append(step.t)
        for r in requests:
            prompt, n = len(r.prompt), len(r.output_token_ids or ())
            admitted = self.admit[r.request_id]
            out: dict[int, float] = {}
            for m, key in enumerate(self._keys[r.request_id]):
                j = (m + 1) * block_size - prompt
                # a block filled by the step that computed output token j - 1, stored after the admission
                if 1 <= j <= n - 1:
                    times = stores.get(key, ())
                    i = bisect.bisect_left(times, admitted)
                    if i < len(times):
                        out[j] = times[i]
            self.deadlines[r.request_id] = out


class StepReplay(TimelineReplay):
    """The recorded-clock replay with admissions and block-filling tokens on the server's steps, checked
    against the server's resident blocks after every step."""

    def __init__(self, config, plan: StepPlan):
        super().__init__(config)
        self.plan = plan
        self.check = StepCheck(plan)
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
            elif kind == FEED:
                self._feed(self.live[item.request_id], j)
            else:
                self._finish(self.live[item.request_id])
            self._admit_waiting()
        return {rid: (r.first_matched, dict(r.causes)) for rid, r in self.ledger.requests.items()}

    def _schedule(self, entry: _Live) -> None:
        item = entry.item
        output = item.output_token_ids
        recorded = token_times(item.arrival, item.timeline, len(output), self.now)
        anchors = {0: self.now, **self.plan.deadlines.get(item.request_id, {})}
        times = [self.plan.snap(t) for t in paced(recorded, anchors)]
        times[-1] = max(times[-1], self.plan.finish[item.request_id])
        for j in range(1, len(output)):
            heapq.heappush(self.events, (max(times[j], self.now), FEED, entry.order, j, item))
        heapq.heappush(self.events, (max(times[-1], self.now), FINISH, entry.order, 0, item))

    def _finish(self, entry: _Live) -> None:
        if entry in self.running:
            self._touch(entry)
        super()._finish(entry)

    def _preempt(self, entry: _Live) -> None:
        self._touch(entry)
        super()._preempt(entry)

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


def step_replay(requests, batches: list[dict], t0: float, config) -> tuple[dict, dict]:
    """(request id -> (hit tokens, miss causes), the step check's report) for the log's timed requests."""
    steps = server_steps(batches, t0)
    plan = StepPlan(requests, steps, config.block_size)
    replay = StepReplay(config, plan)
    hits = replay.run(requests)
    return hits, replay.check.report()


def finishes(requests) -> dict[str, float]:
    """When each request finished: its answer's recorded end, the ends within SNAP_S of each other at the
    latest of them (vLLM finishes them in one step, and frees them in the order it admitted them, which the
    replay's order among equal times keeps; the stream's last chunks reach the proxy a few ms apart)."""
    ends = sorted((r.arrival + r.timeline[1], r.request_id) for r in requests)
    out: dict[str, float] = {}
    group: list[str] = []
    for k, (t, rid) in enumerate(ends):
        group.append(rid)
        if k + 1 == len(ends) or ends[k + 1][0] - t > SNAP_S:
            for member in group:
                out[member] = t
            group = []
    return out


def paced(recorded: list[float], anchors: dict[int, float]) -> list[float]:
    """Each output token's time: at its anchor (a step that stored a block it filled, or the admission for the
    first), evenly between two anchors, and past the last at the recorded pace to the recorded end (the
    proxy records a stream's first token and its mean pace, which a long prefill beside it breaks)."""
    n = len(recorded)
    points = sorted((j, t) for j, t in anchors.items() if 0 <= j < n)
    times = list(recorded)
    for (a, ta), (b, tb) in zip(points, points[1:]):
        for j in range(a, b + 1):
            times[j] = ta + (tb - ta) * (j - a) / (b - a)
    last, t_last = points[-1]
    if last < n - 1:
        pace = max(0.0, recorded[-1] - t_last) / (n - 1 - last)
        for j in range(last, n):
            times[j] = t_last + pace * (j - last)
    return times


def events_beside(log_path, t0: float) -> list[dict] | None:
    """The server's KV-event batches the proxy kept beside the log, on the log's clock (`ts` - t0); None when
    there are none."""
    from kvtui.sources.proxy_events import events_path, read_events

    batches = read_events(events_path(str(log_path)))
    return [{**b, "ts": b["ts"] - t0} for b in batches] or None


def step_fidelity(loaded, timed, config, recorded: dict) -> dict:
    """The fidelity section on the server's steps, with the recorded clock's figures beside it."""
    from kvtui.whatif.fidelity import fidelity

    # vLLM's pool keeps one block back (its null block): the server's num_gpu_blocks less one hold K/V
    pool = dataclasses.replace(config, capacity_tokens=config.capacity_tokens - config.block_size)
    hits, check = step_replay(timed, loaded.server_events, 0.0, pool)
    out = fidelity(loaded, hits, config)
    out["clock"] = "steps"
    out["step_check"] = check
    out["recorded_clock"] = {"equal": recorded["equal"], "mae_points": recorded["mae_points"]}
    return out
