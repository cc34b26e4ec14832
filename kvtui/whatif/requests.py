"""The one request shape every what-if workload becomes, whatever file it came from.

A `SimRequest` has an id, an arrival time in seconds, its prompt token ids, its output (recorded token ids, or
only a length: fresh tokens are made up when it runs) and a cache salt. A Mooncake request holds hash ids
rather than tokens: its token ids are made when the simulation needs them (`prompt_token_ids()`), so a trace of
12,000 x 12k-token prompts never sits in memory whole.

Token id spaces, so that made-up tokens never collide with real ones or with each other:
    [0, 2**40)                      real token ids (a vocabulary is far smaller)
    [2**40, 2**59)                  hash id h of a Mooncake trace with B tokens per id: HASH_BASE + h*B + j,
                                    j < B (a run of B ids that belongs to h alone: no two ids share a token);
                                    a run that writes no trace marks only each block's first token so, the
                                    others being j (compact_tokens)
    [2**60, ...)                    fresh output tokens, one new id per generated token, never reused
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

HASH_BASE = 1 << 40
FRESH_BASE = 1 << 60
MAX_HASH_ID = ((1 << 59) - HASH_BASE) // 4096


class OutputTokens:
    """The tokens a worker's requests generate, the one source for every step: each request's recorded ones in
    order, or fresh ids from `first` on (ids that never repeat)."""

    def __init__(self, first: int = FRESH_BASE):
        self._fresh = first
        # request id -> its recorded tokens still to come, or None (fresh ones)
        self._recorded: dict[str, deque[int] | None] = {}

    def add(self, request_id: str, recorded: Sequence[int] | None) -> None:
        self._recorded[request_id] = None if recorded is None else deque(recorded)

    def forget(self, request_id: str) -> None:
        """The request finished: its tokens are not needed again (memory stays flat on long runs)."""
        self._recorded.pop(request_id, None)

    def take(self, rows: Sequence, n: int) -> list[int]:
        """The next n tokens of each of `rows`, row after row (the engine core's `TokensFor`)."""
        recorded_of = self._recorded
        fresh = self._fresh
        out: list[int] = []
        if n == 1:
            # most calls: one token for each quiet row of a step
            for req in rows:
                recorded = recorded_of[req.request_id]
                if recorded is None:
                    out.append(fresh)
                    fresh += 1
                else:
                    out.append(recorded.popleft())
        else:
            for req in rows:
                recorded = recorded_of[req.request_id]
                if recorded is None:
                    out.extend(range(fresh, fresh + n))
                    fresh += n
                else:
                    out.extend([recorded.popleft() for _ in range(n)])
        self._fresh = fresh
        return out

    def token_for(self, index: int, req) -> int:
        """The next token of `req` (the engine core's `TokenFor`; the chunk index does not matter here)."""
        recorded = self._recorded[req.request_id]
        if recorded is not None:
            return recorded.popleft()
        self._fresh += 1
        return self._fresh - 1


def hash_id_tokens(hash_ids: Sequence[int], input_length: int, trace_block_size: int) -> list[int]:
    """Token ids of a hash-id prompt: each id a run of B ids of its own; the last id holds
    input_length - (n-1)*B tokens."""
    b = trace_block_size
    tokens: list[int] = []
    last = len(hash_ids) - 1
    for i, h in enumerate(hash_ids):
        start = HASH_BASE + h * b
        tokens.extend(range(start, start + (input_length - last * b if i == last else b)))
    return tokens


# j for j < B, made once: the unmarked tokens of compact prompts point into it (no new int objects)
_TEMPLATES: dict[int, list[int]] = {}


def compact_tokens(
    hash_ids: Sequence[int], input_length: int, trace_block_size: int, block_size: int
) -> list[int]:
    """A hash-id prompt for a run that writes no trace, with `block_size` dividing B: the first token of every
    block is its id in the full scheme (HASH_BASE + h*B + j), the others are j. Two blocks are equal exactly
    when their first tokens are, as in the full scheme, and making 12k-token prompts costs pointer copies
    instead of 12k new ints each."""
    b = trace_block_size
    template = _TEMPLATES.get(b)
    if template is None:
        template = _TEMPLATES[b] = list(range(b))
    tokens: list[int] = []
    last = len(hash_ids) - 1
    for i, h in enumerate(hash_ids):
        n = input_length - last * b if i == last else b
        start = len(tokens)
        tokens.extend(template[:n])
        base = HASH_BASE + h * b
        for j in range(0, n, block_size):
            tokens[start + j] = base + j
    return tokens


class OutOfOrder(ValueError):
    """A request in a streamed file arrives before the one above it."""


@dataclass(slots=True)
class SimRequest:
    request_id: str
    # seconds from the start of the workload
    arrival: float
    # token ids (None: made from hash_ids on demand)
    prompt: list[int] | None
    # recorded output; None: output_length fresh tokens
    output_token_ids: list[int] | None = None
    output_length: int = 1
    cache_salt: str | None = None
    # Mooncake: one id per trace block
    hash_ids: list[int] | None = None
    input_length: int = 0
    trace_block_size: int = 0
    phase: str | None = None
    # the server's cached tokens for this request, when its log says (a proxy log): the twin's check
    server_cached: int | None = None
    # when its answer came, in seconds after its arrival (a proxy log): (first output token or None, last),
    # the server's clock the fidelity replay runs on (timeline.py)
    timeline: tuple[float | None, float] | None = None
    _keys: dict = field(default_factory=dict, repr=False)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt) if self.prompt is not None else self.input_length

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids) if self.output_token_ids is not None else self.output_length

    def prompt_token_ids(self, compact_block: int | None = None) -> list[int]:
        """The prompt's token ids; `compact_block`: a block size that divides the trace's, for the compact
        scheme of a run that writes no trace (compact_tokens)."""
        if self.prompt is not None:
            return self.prompt
        if compact_block and self.trace_block_size % compact_block == 0:
            return compact_tokens(self.hash_ids, self.input_length, self.trace_block_size, compact_block)
        return hash_id_tokens(self.hash_ids, self.input_length, self.trace_block_size)


@dataclass
class Workload:
    """Requests in arrival order, where they came from, and what was wrong with the file (kept going)."""

    name: str
    # trace | workload | mooncake | bailian | blocks | proxy-log
    format: str
    requests: list[SimRequest]
    # "line 7: ..." for each line skipped
    problems: list[str] = field(default_factory=list)
    # what the reader assumed
    notes: list[str] = field(default_factory=list)

    # the server's cache settings when the log recorded them (block_size, num_gpu_blocks, prefix caching)
    server: dict | None = None
    # what the trace reader skipped and the run does without, one line each (a cut last line)
    warnings: list[str] = field(default_factory=list)
    # a proxy log's server KV-event batches (kvtui/sources/proxy_events.py), `ts` on the log's clock, or None
    server_events: list[dict] | None = None

    @property
    def prompt_tokens(self) -> int:
        return sum(r.num_prompt_tokens for r in self.requests)

    @property
    def num_requests(self) -> int:
        return len(self.requests)

    @property
    def hash_ids(self) -> bool:
        """Prompts are hash ids: generated tokens take pool space but are never cached."""
        return self.format in ("mooncake", "bailian", "blocks")

    def slice(self, start: int | None, stop: int | None) -> Workload:
        return Workload(
            self.name,
            self.format,
            self.requests[start:stop],
            self.problems,
            self.notes,
            self.server,
            self.warnings,
            # the server's steps are the whole log's
            self.server_events if start is None and stop is None else None,
        )
