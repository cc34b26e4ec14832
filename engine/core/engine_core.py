"""The engine core: the requests and the bookkeeping of a step, with no model (vLLM v1's `EngineCore` with its
scheduler's `update_from_output`).

A step is two calls around whatever produces the next tokens:

    scheduled = core.schedule()                   which chunks run (admission, chunking, preemption)
    ... a forward (Engine), or a cost clock (kvtui's what-if) ...
    finished = core.update_from_output(scheduled, token_for)
                                                  append each computed chunk, take a token where a sequence is
                                                  complete, spawn n > 1 samples, stop, finish, cache blocks

`token_for(index, request)` gives the next token of `request`, whose sequence the chunk at `index` completed
(a parallel sample shares its parent's chunk). The engine samples it from the forward's logits; the what-if
worker takes a recorded or a fresh token. Both go through this one class, so the events of a step, its stops and
its finishes are the same for both. Torch-free: a request's sampling generator is made by `new_generator`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import replace

from engine.config import EngineConfig
from engine.core.edits import EditedSequence, EditError, apply_edit
from engine.core.forks import fork_of
from engine.core.kv_cache import KVCacheManager
from engine.core.quiet_rows import QuietRows, Scan, TokensFor
from engine.core.request import Request, SamplingParams, Status
from engine.core.scheduler import ScheduledStep, Scheduler
from engine.models.shape import ModelShape
from engine.trace.writer import TraceSink

# the next token of a request whose chunk (by its index in the step) completed its sequence
TokenFor = Callable[[int, Request], int]


class EngineCore(QuietRows):
    def __init__(
        self,
        shape: ModelShape,
        config: EngineConfig,
        trace: TraceSink,
        token_text: Callable[[int], str] = str,
        eos_ids: frozenset[int] = frozenset(),
        max_positions: int | None = None,
        new_generator: Callable[[SamplingParams], object] = lambda params: None,
        *,
        cache_generated: bool = True,
        cache_on_allocation: bool = False,
        step_events: bool = True,
        keep_finished: bool = True,
    ):
        """cache_generated=False: generated tokens take pool space but never enter the prefix cache (hash-id
        workloads, whose outputs are unknown). step_events=False: no request, step, chunk and token events (a
        what-if run that writes no trace); the cache's own events are always emitted. keep_finished=False:
        a finished request is forgotten (long what-if runs). cache_on_allocation: blocks enter the prefix cache when
        allocated, as vLLM's do (a what-if twin of a vLLM server)."""
        self.shape, self.config, self.trace = shape, config, trace
        self.token_text = token_text
        self.eos_ids = eos_ids
        self.max_positions = max_positions
        self.new_generator = new_generator
        self.step_events = step_events
        self.keep_finished = keep_finished
        # the manager deals in block ids; the engine's worker applies its decisions to K/V memory
        self.cache = KVCacheManager(
            shape, config, trace, token_text, cache_generated, cache_on_allocation=cache_on_allocation
        )
        self.scheduler = Scheduler(self.cache, trace, config.max_batched_tokens, config.max_num_seqs)
        self.requests: dict[str, Request] = {}
        # called with a request as it finishes, after its blocks are released (the engine's sink divergence)
        self.finish_listeners: list[Callable[[Request], None]] = []
        self.num_steps = 0
        self._ids = itertools.count()

    # --- requests -------------------------------------------------------------------------------------
    def add_request(
        self,
        token_ids: list[int],
        params: SamplingParams | None = None,
        cache_salt: str | None = None,
        request_id: str | None = None,
        phase: str | None = None,
    ) -> str:
        """Queue a prompt of token ids; checked first (empty, larger than the pool or the model, id in use)."""
        params = params or SamplingParams()
        if not token_ids:
            raise ValueError("the prompt is empty")
        capacity = self.cache.capacity_tokens
        if len(token_ids) + params.max_tokens > capacity:
            raise ValueError(
                f"prompt ({len(token_ids)} tokens) + max_tokens ({params.max_tokens}) exceeds the KV "
                f"pool ({self.cache.pool.num_blocks} blocks x {self.cache.block_size} = {capacity} tokens); "
                "raise num_blocks or lower max_tokens"
            )
        limit = self.max_positions
        if limit and len(token_ids) + params.max_tokens > limit:
            raise ValueError(
                f"prompt + max_tokens ({len(token_ids) + params.max_tokens}) exceeds the model's "
                f"context of {limit} positions"
            )
        request_id = request_id or f"r{next(self._ids)}"
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        request = Request(
            request_id, token_ids, params, self.trace.now(), cache_salt, generator=self.new_generator(params)
        )
        self.requests[request_id] = request
        if self.step_events:
            self.trace.emit(
                "request_arrived",
                request_id=request_id,
                prompt_token_ids=token_ids,
                prompt_texts=[self.token_text(t) for t in token_ids],
                max_tokens=params.max_tokens,
                cache_salt=cache_salt,
                parent_id=None,
                phase=phase,
            )
        self.scheduler.add(request)
        return request_id

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work()

    def request(self, request_id: str) -> Request:
        if request_id not in self.requests:
            known = ", ".join(list(self.requests)[-5:]) or "none yet"
            raise ValueError(f"no request {request_id!r} (recent: {known})")
        return self.requests[request_id]

    # --- the step ---------------------------------------------------------------------------------------
    def schedule(self, set_aside: Scan | None = None) -> ScheduledStep | None:
        """The chunks of the next step, or None when this step only preempted (nothing to run).
        `set_aside`: this step's scan (engine/core/quiet_rows.py), whose quiet rows take their tokens outside
        the chunks when that changes no decision (`Scheduler.can_set_aside`; the step's `set_aside` says
        whether they were): a core that writes no step events only. Such a step may hold no chunk."""
        rows = self.checked_scan(set_aside).quiet if set_aside is not None else ()
        ids = set_aside.ids if rows else None
        started = self.trace.now()
        aside = rows if rows and self.scheduler.can_set_aside(rows, ids) else ()
        chunks = self.scheduler.schedule(aside, ids)
        if not chunks and not aside:
            if self.scheduler.has_work() and not self.scheduler.preempted_this_step:
                raise RuntimeError(
                    f"the scheduler could not place any request: the pool of {self.cache.pool.num_blocks} "
                    "blocks is too small for them"
                )
            return None
        rings = self.cache.rings
        if rings.enabled:
            # each chunk continues its rings where they stopped, or starts them afresh
            for chunk in chunks:
                rings.begin(chunk.request, chunk.start)
        index = self.num_steps
        self.num_steps += 1
        decodes = [c.num_tokens == 1 and bool(c.request.output_token_ids) for c in chunks]
        return ScheduledStep(index, chunks, decodes, started, set_aside=list(aside))

    def update_from_output(
        self, scheduled: ScheduledStep, token_for: TokenFor, tokens_for: TokensFor | None = None
    ) -> list[Request]:
        """The step's chunks are computed: append them, take the tokens, finish what stops; then the rows set
        aside take theirs (`tokens_for`, or `token_for` with index -1: they have no chunk). Returns the
        requests that finished in this step, in order."""
        trace, events = self.trace, self.step_events
        # the window layers' rings advance past the chunks (ring_write events) and keep their snapshots
        scheduled.ring_ops = self.cache.rings.commit(scheduled.chunks)
        finished: list[Request] = []
        for index, (chunk, is_decode) in enumerate(zip(scheduled.chunks, scheduled.decodes)):
            req = chunk.request
            req.num_computed += chunk.num_tokens
            if events:
                if is_decode:
                    trace.emit(
                        "decode", request_id=req.request_id, step=scheduled.index, position=chunk.start
                    )
                else:
                    trace.emit(
                        "prefill_chunk",
                        request_id=req.request_id,
                        step=scheduled.index,
                        start=chunk.start,
                        end=chunk.start + chunk.num_tokens,
                    )
            if req.num_computed == req.num_tokens:
                for sample in [req, *self._spawn_samples(req)]:
                    if self.append_token(sample, token_for(index, sample)):
                        finished.append(sample)
            if req.status is Status.RUNNING:
                self.cache.cache_blocks(req)
        if scheduled.set_aside:
            tokens_for = tokens_for or (lambda rows, n: [token_for(-1, req) for req in rows])
            self.append_quiet(scheduled.set_aside, 1, tokens_for)
        if events:
            trace.emit(
                "step",
                step=scheduled.index,
                num_tokens=sum(c.num_tokens for c in scheduled.chunks),
                num_prefill=len(scheduled.chunks) - scheduled.num_decode,
                num_decode=scheduled.num_decode,
                duration=round(trace.now() - scheduled.started, 6),
                free_blocks=self.cache.pool.num_free(),
            )
        return finished

    def append_token(self, req: Request, token: int) -> bool:
        """Record and announce one token of `req`; finish the request if it stops. True when it finished."""
        now = self.trace.now()
        if req.first_token_time is None:
            req.first_token_time = now
        req.last_token_time = now
        req.output_token_ids.append(token)
        if self.step_events:
            self.trace.emit(
                "token_emitted",
                request_id=req.request_id,
                position=req.num_tokens - 1,
                token_id=token,
                text=self.token_text(token),
            )
        reason = self._stop_reason(req, token)
        if reason is None:
            return False
        self.finish(req, reason)
        return True

    def _stop_reason(self, req: Request, token: int) -> str | None:
        if token in req.params.stop_token_ids:
            return "stop"
        if not req.params.ignore_eos and token in self.eos_ids:
            return "eos"
        if req.num_new_tokens >= req.params.max_tokens:
            return "length"
        return None

    def may_stop_within(self, req: Request, n: int) -> bool:
        """The next n tokens of `req` could stop it (the rules of `_stop_reason`): a stop token or eos could
        come, or the n-th reaches max_tokens."""
        params = req.params
        return (
            bool(params.stop_token_ids)
            or (not params.ignore_eos and bool(self.eos_ids))
            or req.num_new_tokens + n >= params.max_tokens
        )

    def finish(self, req: Request, reason: str) -> None:
        """Take the request out of the batch or the queue and release its blocks (full ones stay cached)."""
        req.finish_reason = reason
        self.scheduler.finish(req)
        self.cache.free(req)
        for listener in self.finish_listeners:
            listener(req)
        req.num_computed = 0
        if self.step_events:
            self.trace.emit(
                "request_finished",
                request_id=req.request_id,
                reason=reason,
                num_prompt_tokens=len(req.prompt_token_ids),
                num_output_tokens=len(req.output_token_ids),
                cached_tokens=req.num_cached,
                ttft=_round(req.ttft()),
                tpot=_round(req.tpot()),
            )
        if not self.keep_finished:
            del self.requests[req.request_id]

    def abort(self, request_id: str) -> Request:
        """Stop a waiting or running request now: its blocks go back (full ones stay cached), reason 'aborted'."""
        req = self.request(request_id)
        if req.status is not Status.FINISHED:
            self.finish(req, "aborted")
        return req

    # --- forks and edits ------------------------------------------------------------------------------
    def _spawn_samples(self, req: Request) -> list[Request]:
        """SamplingParams(n > 1): when the prompt is done, fork n - 1 siblings that share its blocks."""
        if req.params.n <= 1 or req.output_token_ids or req.parent_id is not None:
            return []
        return [self.requests[child] for child in self.fork(req.request_id, req.params.n - 1)]

    def fork(self, request_id: str, n: int = 1) -> list[str]:
        """n copies of a request that share every block it holds; a shared partial block is copied on write."""
        parent = self.request(request_id)
        if n < 1:
            raise ValueError(f"fork needs n >= 1 (got {n})")
        finished = parent.status is Status.FINISHED
        if finished and parent.finish_reason in ("eos", "stop"):
            raise ValueError(
                f"{request_id} ended with {self.token_text(parent.output_token_ids[-1])!r} "
                f"({parent.finish_reason}): a fork would generate past its end; insert text at its end to continue"
            )
        if finished and parent.num_tokens + parent.params.max_tokens > self.cache.capacity_tokens:
            raise ValueError(
                f"a fork of {request_id} ({parent.num_tokens} tokens) + max_tokens does not fit the pool of "
                f"{self.cache.capacity_tokens} tokens"
            )
        return [self._fork_one(parent, finished) for _ in range(n)]

    def _fork_one(self, parent: Request, finished: bool) -> str:
        request_id = parent.request_id
        # children numbered per parent: r1.1, r1.2, ...
        k = len(parent.children) + 1
        while f"{request_id}.{k}" in self.requests:
            k += 1
        child_id = f"{request_id}.{k}"
        # a seeded request's samples must differ from each other, and reproducibly so: seed + k for child k
        seed = None if parent.params.seed is None else parent.params.seed + len(parent.children) + 1
        params = replace(parent.params, n=1, seed=seed)
        child = fork_of(parent, child_id, params, self.trace.now(), self.new_generator(params), finished)
        self.requests[child_id] = child
        parent.children.append(child_id)
        if self.step_events:
            self.trace.emit(
                "request_arrived",
                request_id=child_id,
                prompt_token_ids=child.prompt_token_ids,
                prompt_texts=[self.token_text(t) for t in child.prompt_token_ids],
                max_tokens=params.max_tokens,
                cache_salt=child.cache_salt,
                parent_id=request_id,
            )
        self.cache.fork(parent, child)
        if parent.status is Status.RUNNING:
            self.scheduler.adopt(child)
        else:
            child.num_computed = 0
            self.scheduler.add(child)
        return child_id

    def edit(
        self,
        request_id: str,
        position: int,
        token_ids: list[int] | int,
        kind: str = "replace",
        expected_token: int | None = None,
        num_replaced: int | None = None,
    ) -> tuple[EditedSequence, dict]:
        """Edit a running, waiting or finished request at position m: keep the K/V of [0, m), recompute from m
        (engine/core/edits.py says what each kind does). expected_token: the token id the caller saw at m; a
        request that moved on since is refused with EditError instead of edited somewhere else.
        Returns the edited sequence and the `invalidate` event (kept, dropped and copied blocks)."""
        req = self.request(request_id)
        if expected_token is not None:
            tokens = req.tokens
            actual = tokens[position] if 0 <= position < len(tokens) else None
            if actual != expected_token:
                raise EditError(
                    f"{request_id} has {'no token' if actual is None else f'token {actual}'} at "
                    f"position {position}, not the {expected_token} the edit expected: the view is "
                    "behind the engine; look again and retry"
                )
        edited = apply_edit(
            req.prompt_token_ids, req.output_token_ids, position, token_ids, kind, num_replaced
        )
        capacity = self.cache.capacity_tokens
        if len(edited.tokens) + req.params.max_tokens > capacity:
            raise EditError(
                f"the edited sequence ({len(edited.tokens)} tokens) + max_tokens does not fit the pool "
                f"of {capacity} tokens"
            )
        self.trace.emit(
            "edit",
            request_id=request_id,
            position=edited.position,
            kind=kind,
            token_ids=edited.inserted,
            texts=[self.token_text(t) for t in edited.inserted],
            num_deleted=edited.num_deleted,
        )
        cut = self.cache.truncate(req, edited)
        req.generation_start = len(edited.generated)
        req.logits = []
        req.finish_reason = None
        # TTFT after an edit runs from the edit
        req.arrival_time = self.trace.now()
        req.first_token_time = req.last_token_time = None
        if req.status is Status.FINISHED:
            self.scheduler.add(req)
            req.status = Status.WAITING
        event = self.trace.emit(
            "invalidate",
            request_id=request_id,
            **cut,
            recompute_tokens=req.num_tokens - cut["first_recomputed"],
            status="running" if req.status is Status.RUNNING else "waiting",
        )
        return edited, event


def _round(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else round(value, 6)
