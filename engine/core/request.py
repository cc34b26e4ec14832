"""A request's life: its tokens, its block table, how far its K/V are computed, its timings.

Regions of a sequence (the words used everywhere): [0, num_cached) came from the prefix cache;
[num_cached, num_computed) was computed by us; [num_computed, len(tokens)) is still to compute.
The sequence is prompt + generated; the last generated token is never computed until the next step.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SamplingParams:
    max_tokens: int = 64
    # 0 = greedy
    temperature: float = 0.0
    top_p: float = 1.0
    # 0 = off
    top_k: int = 0
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    return_logits: bool = False
    # parallel samples sharing the prompt's blocks
    n: int = 1
    # the log-probability of every prompt token (vLLM's name; the first has none): Engine.prompt_logprobs
    prompt_logprobs: bool = False

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1 (got {self.max_tokens})")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (got {self.temperature})")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (got {self.top_p})")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (got {self.top_k})")
        if self.n < 1:
            raise ValueError(f"n must be at least 1 (got {self.n})")


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str | None
    ttft: float | None
    tpot: float | None
    cached_tokens: int
    # [generated, vocab] torch.Tensor when SamplingParams.return_logits (the engine stacks the worker's rows)
    logits: Any = None
    # SamplingParams(prompt_logprobs=True): each prompt token's log-probability, None for the first (vLLM's shape)
    prompt_logprobs: list[float | None] | None = None


@dataclass
class Request:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_time: float
    cache_salt: str | None = None
    output_token_ids: list[int] = field(default_factory=list)
    block_table: list[int] = field(default_factory=list)
    num_computed: int = 0
    num_cached: int = 0
    status: Status = Status.WAITING
    finish_reason: str | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    # the worker's logits rows (SamplingParams.return_logits) and its torch.Generator: opaque here
    logits: list = field(default_factory=list)
    generator: Any = None
    # larger = admitted later (preemption victim choice)
    admitted_order: int = -1
    # generated tokens that an edit turned into context; max_tokens counts after them
    generation_start: int = 0
    parent_id: str | None = None
    # forks and parallel samples of this request
    children: list[str] = field(default_factory=list)
    # engine.core.radix.Node whose path this request keeps from eviction
    lock_node: object = None
    # leading blocks of block_table already inserted in the prefix tree
    blocks_in_tree: int = 0
    # the prefix lookup was counted in the hit rates already
    matched_before: bool = False
    # window_layout="paged": where the tree served more than every KV-cache group at the first admission (vLLM's
    # shared-prefix junction, in tokens; 0: none): window groups retain the blocks a later hit resumes at there
    junction: int = 0
    # holds its cached prefix (admitted, or an edited finished request re-attached)
    attached: bool = False
    # chained hash of each full block so far: hashed once
    block_keys: list[str] = field(default_factory=list)
    # the same chain without the cache salt
    block_contents: list[str] = field(default_factory=list)

    # (prompt, len, output, len, list)
    _tokens: tuple | None = field(default=None, repr=False, compare=False)

    @property
    def tokens(self) -> list[int]:
        """prompt + generated, made again only when either list was replaced or changed length since the last
        call (edits replace them, decoding appends). Read it, never change it: callers share the list."""
        prompt, output, cached = self.prompt_token_ids, self.output_token_ids, self._tokens
        if (
            cached is None
            or cached[0] is not prompt
            or cached[1] != len(prompt)
            or cached[2] is not output
            or cached[3] != len(output)
        ):
            # no output yet: the prompt itself, not a copy
            cached = self._tokens = (
                prompt,
                len(prompt),
                output,
                len(output),
                prompt + output if output else prompt,
            )
        return cached[4]

    def token_slice(self, start: int, end: int) -> list[int]:
        """tokens[start:end] without building the whole sequence (a step reads only its chunk)."""
        p = len(self.prompt_token_ids)
        if end <= p:
            return self.prompt_token_ids[start:end]
        if start >= p:
            return self.output_token_ids[start - p : end - p]
        return self.prompt_token_ids[start:] + self.output_token_ids[: end - p]

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_to_compute(self) -> int:
        return self.num_tokens - self.num_computed

    @property
    def in_prefill(self) -> bool:
        """More than one token to compute: the prompt (or a recomputation) is not done yet."""
        return self.num_to_compute > 1 or not self.output_token_ids

    @property
    def num_new_tokens(self) -> int:
        """Tokens generated since the request started (or since its last edit)."""
        return len(self.output_token_ids) - self.generation_start

    def ttft(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    def tpot(self) -> float | None:
        n = self.num_new_tokens
        if n < 2 or self.first_token_time is None or self.last_token_time is None:
            return None
        return (self.last_token_time - self.first_token_time) / (n - 1)
