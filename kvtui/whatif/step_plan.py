"""When vLLM did each request's work, read from its steps (kvtui/sources/server_view.py) beside the proxy's log: the
admission step, the prefill's chunks, and the steps that stored the blocks its output filled
(step_clock.py replays the log on them).

    admit    the step that first stored a run of the request's prompt blocks while it waited (one BlockStored
             is one request's new blocks in one step): vLLM admits first come, first served, so a run in the
             prompts of several waiting requests is the earliest's; never before the request arrived nor after
             its first token came back. A request that stored none (its whole blocks were cached, or its
             prompt fills none) is admitted at its arrival, never before a request that arrived earlier
    chunks   a prompt whose blocks were stored over several steps was prefilled in chunks: up to the last
             block each step stored and into the next (the rest of the prompt with the last chunk)
    decode   the steps that stored the blocks its output filled; between them, tokens evenly
    finish   the answer's recorded end; ends a few ms apart were one step's
"""

from __future__ import annotations

import bisect
import statistics

from engine.core.hashing import block_hashes
from kvtui.sources.server_view import Step

# a token's time this close to a server step's is that step's (half a decode step on a loaded CPU server)
SNAP_S = 0.01
# a pace this many times a decode step's is a stall
STALLED = 1.5
# a batch may be stamped this much before the proxy's record of a request's forwarding (two clocks)
SLACK_S = 0.002
# vLLM sends a step's outputs before it publishes the step's KV events: the first token may reach the proxy
# this long before the batch that stored its prompt is stamped
PUBLISHED_AFTER_S = 0.05


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
        # request id -> [(time, prompt tokens computed by then)], one per chunk of its prefill
        self.chunks: dict[str, list[tuple[float, int]]] = {}
        self._admissions(requests, prompt_of, block_size)
        self._decode_deadlines(requests, block_size)

    def _admissions(self, requests, prompt_of: dict, block_size: int) -> None:
        order = {r.request_id: i for i, r in enumerate(requests)}
        waiting = {r.request_id for r in requests}
        # admitted no later than its first token came back (a whole answer: its end)
        answered = {
            r.request_id: r.arrival + (r.timeline[0] or r.timeline[1]) + PUBLISHED_AFTER_S for r in requests
        }
        by_id = {r.request_id: r for r in requests}
        # request id -> the prompt blocks its chunks computed so far, while its prefill goes on
        prefilling: dict[str, int] = {}
        for step in self.steps:
            for run in step.runs:
                first = self._continued(run, prefilling, by_id, block_size)
                if first is not None:
                    self._chunk(by_id[first], run, step, prefilling, block_size)
                    continue
                candidates = [
                    r
                    for r in prompt_of.get(run[0], ())
                    if r.request_id in waiting
                    and r.arrival <= step.t + SLACK_S
                    and step.t <= answered[r.request_id]
                ]
                if candidates:
                    r = min(candidates, key=lambda r: order[r.request_id])
                    waiting.discard(r.request_id)
                    self.admit[r.request_id] = step.t
                    self.admit_step[r.request_id] = step.index
                    self._chunk(r, run, step, prefilling, block_size)
        latest = float("-inf")
        for r in requests:
            if r.request_id in self.admit:
                latest = max(latest, self.admit[r.request_id])
            else:
                self.admit[r.request_id] = max(r.arrival, latest)
                self.admit_step[r.request_id] = None

    def _continued(self, run: list[str], prefilling: dict, by_id: dict, block_size: int) -> str | None:
        """The request whose prefill this run goes on with (its next prompt block), or None."""
        position = self.position.get(run[0])
        for rid in self.owners.get(run[0], ()):
            if prefilling.get(rid) == position:
                return rid
        return None

    def _chunk(self, r, run: list[str], step: Step, prefilling: dict, block_size: int) -> None:
        """The run stored the request's prompt up to its last block: one chunk of its prefill."""
        prompt = len(r.prompt)
        done = self.position[run[-1]] + 1
        chunks = self.chunks.setdefault(r.request_id, [])
        if done >= prompt // block_size:
            prefilling.pop(r.request_id, None)
            chunks.append((step.t, prompt))
        else:
            prefilling[r.request_id] = done
            # the step's token budget ran out inside the next block (at its edge once in block_size), which
            # the chunk allocated
            chunks.append((step.t, done * block_size + 1))

    def next_step(self, t: float, within: float) -> float | None:
        """The first server step after t, if it came within `within` of it."""
        i = bisect.bisect_right(self._times, t)
        if i < len(self._times) and self._times[i] - t <= within:
            return self._times[i]
        return None

    def snap(self, t: float) -> float:
        """A time within half a decode step (SNAP_S at least) of a server step: that step's (a token computed
        in it)."""
        i = bisect.bisect_left(self._times, t)
        near = [self._times[k] for k in (i - 1, i) if 0 <= k < len(self._times)]
        best = min(near, key=lambda x: abs(x - t), default=t)
        return best if abs(best - t) <= max(SNAP_S, self.step_pace / 2) else t

    def _decode_deadlines(self, requests, block_size: int) -> None:
        stores: dict[str, list[float]] = {}
        for step in self.steps:
            for key in step.stored:
                stores.setdefault(key, []).append(step.t)
        paces: list[float] = []
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
            marks = sorted(out.items())
            paces += [(tb - ta) / (b - a) for (a, ta), (b, tb) in zip(marks, marks[1:])]
        # the decode step: the usual pace between two blocks a request filled, or the tenth percentile of the
        # gaps between consecutive steps (most gaps are several steps: a step that stores nothing publishes
        # nothing), whichever is shorter (a long block's span often holds a stall)
        gaps = sorted(b.t - a.t for a, b in zip(self.steps, self.steps[1:]) if b.t > a.t)
        candidates = [statistics.median(paces)] if paces else []
        candidates += [gaps[len(gaps) // 10]] if gaps else []
        self.step_pace = min(candidates, default=0.0)


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


def paced(recorded: list[float], anchors: dict[int, float], step: float) -> list[float]:
    """Each output token's time: at its anchor (a step that stored a block it filled, or the admission for the
    first), evenly between two anchors, and past the last at the recorded pace to the recorded end (the
    proxy records a stream's first token and its mean pace, which a long prefill beside it breaks). Where that
    pace is much slower than a decode `step`, the request stalled (preempted, or queued again): its tokens go at
    the step's pace from the anchor, and the twin's own preemption makes them wait."""
    n = len(recorded)
    points = sorted((j, t) for j, t in anchors.items() if 0 <= j < n)
    if points[-1][0] < n - 1:
        points.append((n - 1, max(recorded[-1], points[-1][1])))
    times = list(recorded)
    for (a, ta), (b, tb) in zip(points, points[1:]):
        pace = (tb - ta) / (b - a)
        if step and pace > STALLED * step:
            pace = step
        for j in range(a, b):
            times[j] = min(ta + pace * (j - a), tb)
        times[b] = tb
    return times
