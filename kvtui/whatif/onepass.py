"""The bridge from a workload to the one-pass LRU curve (curve.py) and the Belady bound (optimal.py): each
request's block keys in arrival order, how many of them may hit, and the tokens each stands for.

    one = OnePass(block_size)
    for request in requests: one.add_request(request)      # or a streamed file, a request at a time
    one.curve(); one.optimal([1024, 4096])

Keys: a hash-id workload uses its ids (when the block size is the trace's), an id and the block's place in
it (when the block size divides the trace's), or the run of ids a block covers (when it is a multiple of
it): the tokens made from hash ids (requests.py) are equal exactly when the ids are, so these name the same
blocks as the engine's hashes, at no hashing cost. Otherwise the engine's chained block hashes of the prompt
(engine/core/hashing.py, salted), which is what the manager matches. Each request lists its prompt's full
blocks; the first (prompt_tokens - 1) // block_size may hit (the last prompt token is always computed).

Memory: the prefix-tree interning and the curve's counters in numpy arrays (about 45 bytes a distinct block:
block_table.py, stack_pass.py), and the chains Belady needs (4 bytes a block reference); requests are buffered
and passed a million block references at a time. Keys that are not ints (token-block hashes, the tuples of a
block size that is a multiple of the trace's) take a dict entry each on top. With `sample` (`--sample RATE`)
only the blocks SHARDS keeps are interned and counted (sampled.py), after a first pass over the same requests
(begin_count .. end_count) that finds the blocks many requests share, and Belady's bound is left out.

What the one-pass model leaves out, and the simulation has: generated tokens of token workloads are cached by
the engine (the next turn of a chat reuses them), partly filled blocks are reused (tails), running requests
pin their blocks, and chunking, batching and preemption change the order of use.
"""

from __future__ import annotations

from array import array

import numpy as np

from kvtui.whatif.block_keys import request_keys
from kvtui.whatif.block_table import PrefixTable, depths_of
from kvtui.whatif.curve import Curve, CurveBuilder
from kvtui.whatif.optimal import OptimalPoint, belady_flat
from kvtui.whatif.requests import SimRequest, Workload
from kvtui.whatif.sampled import Sampler


class OnePass:
    """Requests in arrival order into the curve, keeping what Belady's bound needs. `sample`: a SHARDS rate
    (sampled.py) instead of every block; `batch_blocks`: block references buffered before each numpy pass;
    `chain_limit`: keep Belady's chains only up to this many block references; `part` of `parts`: that hash
    range of the sample only (sample_ranges.py)."""

    def __init__(
        self,
        block_size: int,
        keep_chains: bool = True,
        sample: float | None = None,
        seed: int = 0,
        batch_blocks: int = 1 << 20,
        chain_limit: int | None = None,
        part: int = 0,
        parts: int = 1,
    ):
        self.block_size = block_size
        self.sampler = Sampler(sample, seed, part, parts) if sample is not None else None
        self.table = PrefixTable()
        groups, shift = (
            (self.sampler.builder_groups(), self.sampler.builder_shift())
            if self.sampler is not None
            else (1, 0)
        )
        index_of = self.sampler.builder_index() if self.sampler is not None else None
        self.builder = CurveBuilder(block_tokens=block_size, groups=groups, shift=shift, index_of=index_of)
        # the first of a sampled pass's two passes (begin_count .. end_count): requests are only counted
        self.counting = False
        self.keep_chains = keep_chains and self.sampler is None
        self.batch_blocks = batch_blocks
        # past this many block references the chains are dropped (Belady's bound would not be asked for)
        self.chain_limit = chain_limit
        # node ids of every request (4 bytes a reference), the start of each, and how many may hit
        self.chains: list[np.ndarray] = []
        self.starts = array("q", [0])
        self.limits = array("i")
        self.prompt_tokens = 0
        self.first_arrival: float | None = None
        self.last_arrival = 0.0
        # keys that are not ints (tuples, token-block hashes) get ints of their own
        self._codes: dict = {}
        self._keys = array("q")
        self._key_starts = array("q", [0])
        self._key_limits = array("q")
        self._curve: Curve | None = None

    def begin_count(self, expected_references: int) -> None:
        """A sampled pass's first pass starts: the requests added until end_count() find the blocks that
        many requests share (sampled.py), and the same requests are then added again."""
        if self.sampler is not None:
            self.sampler.begin_count(expected_references)
            self.counting = True

    def end_count(self) -> None:
        self._flush()
        self.counting = False
        self.prompt_tokens, self.first_arrival, self.last_arrival = 0, None, 0.0

    def add_request(self, request: SimRequest) -> None:
        if self.first_arrival is None:
            self.first_arrival = request.arrival
        self.last_arrival = request.arrival
        self.add(request_keys(request, self.block_size), request.num_prompt_tokens)

    @property
    def arrival_span(self) -> float:
        """Seconds from the first arrival to the last (what a day's figures are scaled from)."""
        return 0.0 if self.first_arrival is None else self.last_arrival - self.first_arrival

    def add(self, keys, prompt_tokens: int) -> None:
        if keys and type(keys[0]) is not int:
            codes = self._codes
            keys = [codes.setdefault(key, len(codes)) for key in keys]
        self._keys.extend(keys)
        self._key_starts.append(len(self._keys))
        self._key_limits.append(max(prompt_tokens - 1, 0) // self.block_size)
        self.prompt_tokens += prompt_tokens
        if len(self._keys) >= self.batch_blocks:
            self._flush()

    def add_batch(self, keys: np.ndarray, starts: np.ndarray, prompt_tokens: np.ndarray) -> None:
        """Whole requests at once: request i's keys are keys[starts[i]:starts[i + 1]] (int64), its prompt
        prompt_tokens[i] tokens (what a binary block trace hands over; arrivals are the caller's)."""
        self._flush()
        self.prompt_tokens += int(prompt_tokens.sum())
        limits = np.maximum(prompt_tokens - 1, 0) // self.block_size
        self._pass(np.asarray(keys, dtype=np.int64), np.asarray(starts, dtype=np.int64), limits)

    def _flush(self) -> None:
        if len(self._key_limits):
            keys = np.frombuffer(self._keys, dtype=np.int64).copy()
            starts = np.frombuffer(self._key_starts, dtype=np.int64).copy()
            limits = np.frombuffer(self._key_limits, dtype=np.int64).copy()
            self._keys, self._key_starts, self._key_limits = array("q"), array("q", [0]), array("q")
            self._pass(keys, starts, limits)

    def _pass(self, keys: np.ndarray, starts: np.ndarray, limits: np.ndarray) -> None:
        self._curve = None
        if self.counting:
            self.sampler.count(keys, starts)
            return
        counts = np.diff(starts)
        may_hit = depths_of(starts, len(keys)) < np.repeat(limits, counts)
        if self.sampler is not None:
            self.sampler.add(self.table, self.builder, keys, starts, may_hit)
            return
        nodes = self.table.intern(keys, starts)
        self.builder.add_batch(nodes, starts, may_hit)
        if self.keep_chains:
            self.chains.append(nodes.astype(np.int32))
            base = self.starts[-1]
            self.starts.extend((starts[1:] + base).tolist())
            self.limits.extend(np.minimum(limits, counts).tolist())
            if self.chain_limit is not None and self.builder.total_blocks > self.chain_limit:
                self.keep_chains = False
                self.chains, self.starts, self.limits = [], array("q", [0]), array("i")

    @property
    def references(self) -> int:
        """Block references so far (what Belady's time grows with)."""
        self._flush()
        return self.builder.total_blocks if self.sampler is None else self.sampler.total_blocks

    @property
    def distinct_blocks(self) -> int:
        self._flush()
        return len(self.table)

    def curve(self) -> Curve:
        """The curve so far (made once for all the requests added: it is as large as the distinct blocks)."""
        self._flush()
        if self._curve is None:
            if self.sampler is not None:
                self._curve = self.sampler.curve(self.builder)
            else:
                self._curve = self.builder.curve(len(self.table))
        return self._curve

    def optimal(self, capacities_tokens: list[int]) -> list[OptimalPoint]:
        """Belady's bound at each capacity (tokens); needs keep_chains."""
        self._flush()
        bs = self.block_size
        # a plain array: Belady's loop reads it an element at a time
        flat = array("i", np.concatenate(self.chains).tobytes() if self.chains else b"")
        return belady_flat(
            flat,
            self.starts,
            self.limits,
            len(self.table),
            [c // bs for c in capacities_tokens],
            block_tokens=bs,
        )


def of_workload(
    workload: Workload, block_size: int, keep_chains: bool = True, sample: float | None = None, seed: int = 0
) -> OnePass:
    one = OnePass(block_size, keep_chains, sample, seed)
    if one.sampler is not None and not one.sampler.whole:
        one.begin_count(sum(r.num_prompt_tokens // block_size for r in workload.requests))
        for request in workload.requests:
            one.add_request(request)
        one.end_count()
    for request in workload.requests:
        one.add_request(request)
    return one


def lru_curve_of(workload: Workload, block_size: int) -> Curve:
    """The one-pass LRU curve of the workload's prompts at this block size."""
    return of_workload(workload, block_size, keep_chains=False).curve()


def lru_points(workload: Workload, block_size: int, capacities_tokens: list[int]) -> list[int]:
    """Hit tokens of the one-pass LRU curve at each capacity (tokens)."""
    curve = lru_curve_of(workload, block_size)
    return [curve.hit_tokens(c // block_size) for c in capacities_tokens]


def optimal_points(workload: Workload, block_size: int, capacities_tokens: list[int]) -> list[int]:
    """Hit tokens of Belady's bound at each capacity (tokens)."""
    return [p.hit_tokens for p in of_workload(workload, block_size).optimal(capacities_tokens)]


def dense_points(curve: Curve, block_size: int, prompt_tokens: int, n: int = 48) -> list[dict]:
    """The curve at n log-spaced capacities, from one block to where it is flat (what the UI draws)."""
    top = max(curve.distinct_blocks, 1)
    blocks = sorted({max(1, round(top ** (i / (n - 1)))) for i in range(n)})
    return [
        {
            "capacity_tokens": b * block_size,
            "token_hit_rate": curve.hit_tokens(b) / prompt_tokens if prompt_tokens else 0.0,
        }
        for b in blocks
    ]
