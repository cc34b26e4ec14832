"""The Engine facade: submit prompts, step the batch, read outputs; every cache mutation goes to the trace."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch

from engine.config import DEFAULT_KV_MEMORY_MB, EngineConfig  # noqa: F401  (EngineConfig: part of this API)
from engine.core.edits import EditError, apply_edit
from engine.core.kv_cache import KVCacheManager
from engine.core.request import Request, RequestOutput, SamplingParams, Status
from engine.core.scheduler import Scheduler
from engine.models.loading import EMBEDDED_MODEL, describe, load_model
from engine.models.text import Prompt, TokenText
from engine.trace import TraceSink, TraceWriter
from engine.worker.paged_kv import PagedKV
from engine.worker.ring_tensors import RingTensors
from engine.worker.runner import ModelRunner
from engine.worker.sampling import make_generator
from engine.worker.scoring import PromptLogprobs, Score
from engine.worker.sinks import sink_divergence


class Engine:
    def __init__(self, model, tokenizer=None, config: EngineConfig | None = None, name: str | None = None):
        self.config = config or EngineConfig()
        self.model = model
        self.tokenizer = tokenizer
        # prompts to ids, ids to text (the trace carries both)
        self.text = TokenText(tokenizer, model)
        self.shape = describe(model, name)
        if self.config.window is not None:
            self.shape = self.shape.with_sinks(self.config.sink_tokens, self.config.window)
        device = next(model.parameters()).device
        dtype = next(model.parameters()).dtype
        self.trace = TraceSink()
        # the manager deals in block ids (torch-free); the runner owns the K/V memory and applies its decisions
        self.cache = KVCacheManager(self.shape, self.config, self.trace, self.token_text)
        self.scheduler = Scheduler(
            self.cache, self.trace, self.config.max_batched_tokens, self.config.max_num_seqs
        )
        self.kv = PagedKV(self.shape, self.cache.pool.num_blocks, self.config.block_size, dtype, device)
        self.rings = RingTensors(self.cache.rings, dtype, device)
        self.runner = ModelRunner(
            model, self.kv, self.cache.pool, self.shape.windows, self.rings, self.config.fast_prefill
        )
        self.requests: dict[str, Request] = {}
        # SamplingParams(prompt_logprobs=True): request id -> log-probability of each prompt token so far
        self._prompt_logprobs = PromptLogprobs()
        self._ids = itertools.count()
        self._step = 0
        self.trace.set_header(
            {
                "model": self.shape.to_json(),
                "block_size": self.config.block_size,
                "num_blocks": self.cache.pool.num_blocks,
                "bytes_per_block": self.shape.kv_bytes_per_block(self.config.block_size),
                "bytes_per_token": self.shape.kv_bytes_per_token(),
                "config": asdict(self.config),
            }
        )

    # --- construction ---------------------------------------------------------------------------------
    @classmethod
    def load(cls, model: str = EMBEDDED_MODEL, config: EngineConfig | None = None, progress=None) -> Engine:
        config = config or EngineConfig()
        hf_model, tokenizer, name = load_model(
            model, device=config.device, dtype=config.dtype, progress=progress
        )
        return cls(hf_model, tokenizer, config, name)

    @classmethod
    def from_model(cls, hf_model, tokenizer=None, config: EngineConfig | None = None) -> Engine:
        return cls(hf_model, tokenizer, config)

    def add_trace_file(self, path: str | Path) -> None:
        self.trace.add_writer(TraceWriter(path))

    def close(self) -> None:
        self.trace.close()

    # --- requests -------------------------------------------------------------------------------------
    def encode(self, prompt: Prompt) -> list[int]:
        return self.text.encode(prompt)

    def token_text(self, token_id: int) -> str:
        return self.text.token_text(token_id)

    def submit(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        cache_salt: str | None = None,
        request_id: str | None = None,
        phase: str | None = None,
    ) -> str:
        params = params or SamplingParams()
        token_ids = self.encode(prompt)
        if not token_ids:
            raise ValueError("the prompt is empty")
        capacity = self.cache.capacity_tokens
        if len(token_ids) + params.max_tokens > capacity:
            raise ValueError(
                f"prompt ({len(token_ids)} tokens) + max_tokens ({params.max_tokens}) exceeds the KV "
                f"pool ({self.cache.pool.num_blocks} blocks x {self.cache.block_size} = {capacity} tokens); "
                "raise num_blocks or lower max_tokens"
            )
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit and len(token_ids) + params.max_tokens > limit:
            raise ValueError(
                f"prompt + max_tokens ({len(token_ids) + params.max_tokens}) exceeds the model's "
                f"context of {limit} positions"
            )
        request_id = request_id or f"r{next(self._ids)}"
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        request = Request(
            request_id, token_ids, params, self.trace.now(), cache_salt, generator=make_generator(params)
        )
        self.requests[request_id] = request
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

    def output(self, request_id: str) -> RequestOutput:
        req = self.requests[request_id]
        return RequestOutput(
            request_id=req.request_id,
            prompt_token_ids=list(req.prompt_token_ids),
            token_ids=list(req.output_token_ids),
            text=self.text.detokenize(req.output_token_ids),
            finish_reason=req.finish_reason,
            ttft=req.ttft(),
            tpot=req.tpot(),
            cached_tokens=req.num_cached,
            logits=torch.stack(req.logits) if req.logits else None,
            prompt_logprobs=self._prompt_logprobs.get(request_id) if req.params.prompt_logprobs else None,
        )

    def generate(
        self,
        prompts: Prompt | Iterable[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Run prompts to completion together (continuous batching); outputs in input order."""
        if isinstance(prompts, str) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]
        prompts = list(prompts)
        if params is None or isinstance(params, SamplingParams):
            params = [params or SamplingParams()] * len(prompts)
        ids = [self.submit(p, sp) for p, sp in zip(prompts, params, strict=True)]

        # these requests and their parallel samples (SamplingParams.n)
        def unfinished() -> bool:
            family = (self.requests[c] for i in ids for c in [i, *self.requests[i].children])
            return any(r.finish_reason is None for r in family)

        while unfinished():
            if not self.has_unfinished():
                raise RuntimeError(f"requests {ids} were dropped by the scheduler")
            self.step()
        return [self.output(i) for i in ids]

    # --- the step -------------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Run one iteration: schedule, one forward over the flattened batch, sample. Returns finished outputs."""
        started = self.trace.now()
        chunks = self.scheduler.schedule()
        if not chunks:
            if (self.scheduler.running or self.scheduler.waiting) and not self.scheduler.preempted_this_step:
                raise RuntimeError(
                    "the scheduler could not place any request: the pool is too small for them"
                )
            return []
        step = self._step
        self._step += 1
        # a decode computes the last token of a request that has generated: classified before sampling adds one
        decodes = [c.num_tokens == 1 and bool(c.request.output_token_ids) for c in chunks]
        self._prompt_logprobs.before_step(chunks, self.runner)
        result = self.runner.execute(chunks)
        self._prompt_logprobs.after_step(chunks, result.prompt_logprobs)
        finished = []
        for index, (chunk, is_decode) in enumerate(zip(chunks, decodes)):
            req = chunk.request
            req.num_computed += chunk.num_tokens
            if is_decode:
                self.trace.emit("decode", request_id=req.request_id, step=step, position=chunk.start)
            else:
                self.trace.emit(
                    "prefill_chunk",
                    request_id=req.request_id,
                    step=step,
                    start=chunk.start,
                    end=chunk.start + chunk.num_tokens,
                )
            if req.num_computed == req.num_tokens:
                for sample_of in [req, *self._spawn_samples(req)]:
                    token = (
                        result.token_ids[index]
                        if sample_of is req
                        else result.sample(index, sample_of.params, sample_of.generator)
                    )
                    if self._emit_token(sample_of, token, result.logits[index]):
                        finished.append(self.output(sample_of.request_id))
            if req.status is Status.RUNNING:
                self.cache.cache_blocks(req)
        self.trace.emit(
            "step",
            step=step,
            num_tokens=sum(c.num_tokens for c in chunks),
            num_prefill=len(chunks) - sum(decodes),
            num_decode=sum(decodes),
            duration=round(self.trace.now() - started, 6),
            free_blocks=self.cache.num_free(),
        )
        self.trace.flush()
        return finished

    def _emit_token(self, req: Request, token: int, row: torch.Tensor) -> bool:
        """Record and announce one sampled token; finish the request if it stops. True when it finished."""
        if req.params.return_logits:
            req.logits.append(row.detach().cpu())
        now = self.trace.now()
        if req.first_token_time is None:
            req.first_token_time = now
        req.last_token_time = now
        req.output_token_ids.append(token)
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
        self._finish(req, reason)
        return True

    def _stop_reason(self, req: Request, token: int) -> str | None:
        if token in req.params.stop_token_ids:
            return "stop"
        if not req.params.ignore_eos and token in self.text.eos_ids:
            return "eos"
        if req.num_new_tokens >= req.params.max_tokens:
            return "length"
        return None

    def _finish(self, req: Request, reason: str) -> None:
        req.finish_reason = reason
        self.scheduler.finish(req)
        self.cache.free(req)
        # sinks change the answer: by how much
        if self.shape.forced_window is not None and req.output_token_ids:
            self.trace.emit("sink_divergence", **sink_divergence(req, self.runner, self.cache.rings))
        req.num_computed = 0
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

    def abort(self, request_id: str) -> RequestOutput:
        """Stop a waiting or running request now: its blocks go back (full ones stay cached), reason 'aborted'."""
        req = self._request(request_id)
        if req.status is not Status.FINISHED:
            self._finish(req, "aborted")
            self.trace.flush()
        return self.output(request_id)

    # --- forks and edits ------------------------------------------------------------------------------
    def fork(self, request_id: str, n: int = 1) -> list[str]:
        """n copies of a request that share every block it holds; a shared partial block is copied on write."""
        parent = self._request(request_id)
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
        children = []
        for _ in range(n):
            # children numbered per parent: r1.1, r1.2, ...
            k = len(parent.children) + 1
            while f"{request_id}.{k}" in self.requests:
                k += 1
            child_id = f"{request_id}.{k}"
            # a seeded request's samples must differ from each other, and reproducibly so: seed + k for child k
            seed = None if parent.params.seed is None else parent.params.seed + len(parent.children) + 1
            params = replace(parent.params, n=1, seed=seed)
            child = Request(
                child_id,
                list(parent.prompt_token_ids),
                params,
                self.trace.now(),
                parent.cache_salt,
                output_token_ids=list(parent.output_token_ids),
                num_computed=parent.num_computed,
                num_cached=parent.num_cached,
                generator=make_generator(params),
                generation_start=parent.generation_start,
                parent_id=request_id,
                first_token_time=parent.first_token_time,
                last_token_time=parent.last_token_time,
            )
            child.arrival_time = parent.arrival_time
            if finished:
                # a fork of a finished request is a new run from where it stopped, as an edit at its end is:
                # max_tokens more tokens, TTFT and TPOT from the fork (not across the idle time before it)
                child.generation_start = len(child.output_token_ids)
                child.first_token_time = child.last_token_time = None
                child.arrival_time = self.trace.now()
            self.requests[child_id] = child
            parent.children.append(child_id)
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
            children.append(child_id)
        return children

    def edit(
        self,
        request_id: str,
        position: int,
        token_ids: list[int] | int | str,
        kind: str = "replace",
        expected_token: int | None = None,
        num_replaced: int | None = None,
    ) -> dict:
        """Edit a running, waiting or finished request at position m: keep the K/V of [0, m), recompute from m.

        token_ids: the new tokens (ids, or text to tokenize); for delete, how many tokens (or a list of that
        length). num_replaced: for replace, how many tokens from m the new ones stand for (default: as many as
        given), so a selection becomes text of any length in one edit. expected_token: the token id the caller
        saw at m; a request that moved on since (a live view behind the engine) is refused with EditError
        instead of edited somewhere else.
        Returns the `invalidate` event (kept, dropped and copied blocks, recompute cost).
        """
        req = self._request(request_id)
        if expected_token is not None:
            tokens = req.tokens
            actual = tokens[position] if 0 <= position < len(tokens) else None
            if actual != expected_token:
                raise EditError(
                    f"{request_id} has {'no token' if actual is None else f'token {actual}'} at "
                    f"position {position}, not the {expected_token} the edit expected: the view is "
                    "behind the engine; look again and retry"
                )
        if not isinstance(token_ids, int):
            token_ids = self.text.edit_tokens(token_ids)
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
        self._prompt_logprobs.cut(request_id, min(edited.position, len(req.prompt_token_ids)))
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
        self.trace.flush()
        return event

    # --- scoring --------------------------------------------------------------------------------------------
    def prompt_logprobs(self, request_id: str) -> list[float | None]:
        """The log-probability of every prompt token computed so far (SamplingParams(prompt_logprobs=True));
        the first token has none. Complete once the request has produced its first token."""
        req = self._request(request_id)
        if not req.params.prompt_logprobs:
            raise ValueError(f"{request_id} was not submitted with SamplingParams(prompt_logprobs=True)")
        return self._prompt_logprobs.get(request_id)

    def score(self, prompt: Prompt, cache_salt: str | None = None) -> Score:
        """The log-probability of every token of `prompt` under the model, through the cache (the engine's
        other requests step along). Exact against the model's own forward (engine/worker/scoring.py)."""
        params = SamplingParams(max_tokens=1, ignore_eos=True, prompt_logprobs=True)
        request_id = self.submit(prompt, params, cache_salt)
        while self.requests[request_id].finish_reason is None:
            self.step()
        tokens = self.requests[request_id].prompt_token_ids
        return Score(list(tokens), self.prompt_logprobs(request_id), [self.token_text(t) for t in tokens])

    def _spawn_samples(self, req: Request) -> list[Request]:
        """SamplingParams(n > 1): when the prompt is done, fork n - 1 siblings that share its blocks."""
        if req.params.n <= 1 or req.output_token_ids or req.parent_id is not None:
            return []
        return [self.requests[child] for child in self.fork(req.request_id, req.params.n - 1)]

    def _request(self, request_id: str) -> Request:
        if request_id not in self.requests:
            known = ", ".join(list(self.requests)[-5:]) or "none yet"
            raise ValueError(f"no request {request_id!r} (recent: {known})")
        return self.requests[request_id]


def _round(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else round(value, 6)
