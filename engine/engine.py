"""The Engine facade: the engine core (engine/core/engine_core.py) + the model runner + the tokenizer. Submit
prompts, step the batch, read outputs; every cache mutation goes to the trace."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from engine.config import DEFAULT_KV_MEMORY_MB, EngineConfig  # noqa: F401  (EngineConfig: part of this API)
from engine.core.edits import EditError  # noqa: F401  (raised by Engine.edit: part of this API)
from engine.core.engine_core import EngineCore, ScheduledStep
from engine.core.request import Request, RequestOutput, SamplingParams
from engine.models.loading import EMBEDDED_MODEL, describe, load_model
from engine.models.text import Prompt, TokenText
from engine.trace import TraceSink, TraceWriter
from engine.worker.paged_kv import PagedKV
from engine.worker.ring_tensors import RingTensors
from engine.worker.runner import ModelRunner
from engine.worker.sampling import make_generator
from engine.worker.scoring import PromptLogprobs, Score
from engine.worker.sinks import sink_divergence
from engine.worker.tier_tensors import HostKV


class Engine:
    def __init__(self, model, tokenizer=None, config: EngineConfig | None = None, name: str | None = None):
        self.config = config or EngineConfig()
        if self.config.disk_blocks:
            raise ValueError("the engine keeps no disk tier: disk_blocks is for kvtui whatif runs")
        self.model = model
        self.tokenizer = tokenizer
        # prompts to ids, ids to text (the trace carries both)
        self.text = TokenText(tokenizer, model)
        self.shape = describe(model, name)
        if self.config.window is not None:
            self.shape = self.shape.with_sinks(self.config.sink_tokens, self.config.window)
        if self.config.kv_dtype is not None:
            self.shape = self.shape.with_kv_dtype(self.config.kv_dtype)
        device = next(model.parameters()).device
        dtype = next(model.parameters()).dtype
        self.trace = TraceSink()
        # the core owns the requests and the step's bookkeeping (torch-free, in block ids); the runner owns
        # the K/V memory and applies the manager's decisions
        self.core = EngineCore(
            self.shape,
            self.config,
            self.trace,
            self.token_text,
            eos_ids=frozenset(self.text.eos_ids),
            max_positions=getattr(model.config, "max_position_embeddings", None),
            new_generator=make_generator,
        )
        self.cache = self.core.cache
        self.scheduler = self.core.scheduler
        self.requests: dict[str, Request] = self.core.requests
        kv_dtype = self.config.kv_dtype
        # window_layout="paged": every KV-cache group pages its layers' K/V in the one pool
        paged_windows = self.cache.groups if self.config.window_layout == "paged" else None
        self.kv = PagedKV(
            self.shape,
            self.cache.pool.num_blocks,
            self.config.block_size,
            dtype,
            device,
            kv_dtype,
            groups=None if paged_windows is None else paged_windows.groups,
        )
        self.rings = RingTensors(self.cache.rings, dtype, device, kv_dtype)
        self.host_kv = HostKV(self.kv, self.config.host_blocks) if self.config.host_blocks else None
        self.runner = ModelRunner(
            model,
            self.kv,
            self.cache.pool,
            self.shape.windows,
            self.rings,
            host=self.host_kv,
            group_blocks=paged_windows,
        )
        # sinks change the answer: by how much, as each request finishes
        if self.shape.forced_window is not None:
            self.core.finish_listeners.append(self._sink_divergence)
        # SamplingParams(prompt_logprobs=True): request id -> log-probability of each prompt token so far
        self._prompt_logprobs = PromptLogprobs()
        self.trace.set_header(
            {
                "model": self.shape.to_json(),
                "block_size": self.config.block_size,
                "num_blocks": self.cache.pool.num_blocks,
                # window_layout="paged": a block holds the largest KV-cache group's layers
                "bytes_per_block": self.shape.kv_bytes_per_block(self.config.block_size)
                if paged_windows is None
                else self.kv.nbytes // self.cache.pool.num_blocks,
                "bytes_per_token": self.shape.kv_bytes_per_token(),
                "kv_dtype": kv_dtype,
                "config": asdict(self.config),
                **self.cache.groups.header_fields(),
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
        return self.core.add_request(self.encode(prompt), params, cache_salt, request_id, phase)

    def has_unfinished(self) -> bool:
        return self.core.has_unfinished()

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
        scheduled = self.core.schedule()
        if scheduled is None:
            return []
        chunks = scheduled.chunks
        self._prompt_logprobs.before_step(chunks, self.runner)
        result = self.runner.execute(chunks)
        self._prompt_logprobs.after_step(chunks, result.prompt_logprobs)
        finished = self.core.update_from_output(scheduled, _Sampler(scheduled, result))
        self.rings.commit(scheduled.ring_ops)
        self.trace.flush()
        return [self.output(req.request_id) for req in finished]

    def _sink_divergence(self, req: Request) -> None:
        if req.output_token_ids:
            self.trace.emit("sink_divergence", **sink_divergence(req, self.runner, self.cache.rings))

    def abort(self, request_id: str) -> RequestOutput:
        """Stop a waiting or running request now: its blocks go back (full ones stay cached), reason 'aborted'."""
        self.core.abort(request_id)
        self.trace.flush()
        return self.output(request_id)

    # --- forks and edits ------------------------------------------------------------------------------
    def fork(self, request_id: str, n: int = 1) -> list[str]:
        """n copies of a request that share every block it holds; a shared partial block is copied on write."""
        return self.core.fork(request_id, n)

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
        req = self.core.request(request_id)
        num_prompt = len(req.prompt_token_ids)
        if not isinstance(token_ids, int):
            token_ids = self.text.edit_tokens(token_ids)
        edited, event = self.core.edit(request_id, position, token_ids, kind, expected_token, num_replaced)
        self._prompt_logprobs.cut(request_id, min(edited.position, num_prompt))
        self.trace.flush()
        return event

    # --- scoring --------------------------------------------------------------------------------------------
    def prompt_logprobs(self, request_id: str) -> list[float | None]:
        """The log-probability of every prompt token computed so far (SamplingParams(prompt_logprobs=True));
        the first token has none. Complete once the request has produced its first token."""
        req = self.core.request(request_id)
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


class _Sampler:
    """The step's tokens from the forward: a chunk's own row, or a fresh sample of it for a parallel sample;
    the row kept where the request asked for its logits."""

    def __init__(self, scheduled: ScheduledStep, result):
        self.scheduled, self.result = scheduled, result

    def __call__(self, index: int, req: Request) -> int:
        result = self.result
        if req is self.scheduled.chunks[index].request:
            token = result.token_ids[index]
        else:
            token = result.sample(index, req.params, req.generator)
        if req.params.return_logits:
            req.logits.append(result.logits[index].detach().cpu())
        return token
