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

Memory: the prefix-tree interning (a dict entry per distinct block), the curve's counters, and the chains
Belady needs as one flat array (4 bytes a block reference), so a million-request trace fits in a few GB.

What the one-pass model leaves out, and the simulation has: generated tokens of token workloads are cached by
the engine (the next turn of a chat reuses them), partly filled blocks are reused (tails), running requests
pin their blocks, and chunking, batching and preemption change the order of use.
"""

from __future__ import annotations

from array import array

from engine.core.hashing import block_hashes
from kvtui.whatif.curve import Curve, CurveBuilder
from kvtui.whatif.optimal import OptimalPoint, belady_flat
from kvtui.whatif.prefix_nodes import PrefixNodes
from kvtui.whatif.requests import SimRequest, Workload


def request_keys(request: SimRequest, block_size: int) -> list:
    """The keys of the request's full prompt blocks at this block size."""
    n = request.num_prompt_tokens
    full = n // block_size
    ids, trace_block = request.hash_ids, request.trace_block_size
    if ids is not None and block_size == trace_block:
        return list(ids[:full])
    if ids is not None and trace_block % block_size == 0:
        per = trace_block // block_size
        # block j lies in id j // per, at place j % per: one int names both
        return [ids[j // per] * per + j % per for j in range(full)]
    if ids is not None and block_size % trace_block == 0:
        per = block_size // trace_block
        return [tuple(ids[j * per : (j + 1) * per]) for j in range(full)]
    return block_hashes(request.prompt_token_ids()[: full * block_size], block_size, request.cache_salt)[0]


class OnePass:
    """Requests in arrival order into the curve, keeping what Belady's bound needs."""

    def __init__(self, block_size: int, keep_chains: bool = True):
        self.block_size = block_size
        self.nodes = PrefixNodes()
        self.builder = CurveBuilder(block_tokens=block_size)
        self.keep_chains = keep_chains
        self.flat = array("i")
        self.starts = array("q", [0])
        self.limits = array("i")
        self.prompt_tokens = 0
        self.first_arrival: float | None = None
        self.last_arrival = 0.0

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
        nodes = self.nodes.intern(keys)
        limit = max(prompt_tokens - 1, 0) // self.block_size
        self.builder.add(nodes, limit)
        self.prompt_tokens += prompt_tokens
        if self.keep_chains:
            self.flat.extend(nodes)
            self.starts.append(len(self.flat))
            self.limits.append(limit)

    @property
    def references(self) -> int:
        """Block references so far (what Belady's time grows with)."""
        return self.builder.total_blocks

    def curve(self) -> Curve:
        return self.builder.curve(len(self.nodes))

    def optimal(self, capacities_tokens: list[int]) -> list[OptimalPoint]:
        """Belady's bound at each capacity (tokens); needs keep_chains."""
        bs = self.block_size
        return belady_flat(
            self.flat,
            self.starts,
            self.limits,
            len(self.nodes),
            [c // bs for c in capacities_tokens],
            block_tokens=bs,
        )


def of_workload(workload: Workload, block_size: int, keep_chains: bool = True) -> OnePass:
    one = OnePass(block_size, keep_chains)
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
