"""A fork's request: a copy of its parent that continues from the same tokens (Engine.fork, SamplingParams.n)."""

from __future__ import annotations

from engine.core.request import Request, SamplingParams


def fork_of(
    parent: Request, child_id: str, params: SamplingParams, now: float, generator, finished: bool
) -> Request:
    """The child holds the parent's prompt, output and progress; its blocks are shared by the manager."""
    child = Request(
        child_id,
        list(parent.prompt_token_ids),
        params,
        now,
        parent.cache_salt,
        output_token_ids=list(parent.output_token_ids),
        num_computed=parent.num_computed,
        num_cached=parent.num_cached,
        generator=generator,
        generation_start=parent.generation_start,
        parent_id=parent.request_id,
        first_token_time=parent.first_token_time,
        last_token_time=parent.last_token_time,
    )
    child.arrival_time = parent.arrival_time
    if finished:
        # a fork of a finished request is a new run from where it stopped, as an edit at its end is:
        # max_tokens more tokens, TTFT and TPOT from the fork (not across the idle time before it)
        child.generation_start = len(child.output_token_ids)
        child.first_token_time = child.last_token_time = None
        child.arrival_time = now
    return child
