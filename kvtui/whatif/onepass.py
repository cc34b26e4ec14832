"""The bridge from a workload to the one-pass LRU curve (curve.py) and the Belady bound (optimal.py): each
request's block keys in arrival order, how many of them may hit, and the tokens each stands for.

Keys: a hash-id workload whose block size equals its trace block size uses the hash ids themselves (the
curve interns prefixes, so they are exact); otherwise the engine's chained block hashes of the prompt
(engine/core/hashing.py, salted), which is what the manager matches. Each request lists its prompt's full
blocks; the first (prompt_tokens - 1) // block_size may hit (the last prompt token is always computed).

What the one-pass model leaves out, and the simulation has: generated tokens of token workloads are cached by
the engine (the next turn of a chat reuses them), partly filled blocks are reused (tails), running requests
pin their blocks, and chunking, batching and preemption change the order of use.
"""

from __future__ import annotations

from engine.core.hashing import block_hashes
from kvtui.whatif.requests import Workload


def block_keys(workload: Workload, block_size: int) -> tuple[list[list], list[int], list[list[int]]]:
    """(keys per request, matchable blocks per request, tokens per block per request)."""
    keys, matchable, weights = [], [], []
    for r in workload.requests:
        n = r.num_prompt_tokens
        full = n // block_size
        if r.hash_ids is not None and block_size == r.trace_block_size:
            k = list(r.hash_ids[:full])
        else:
            k = block_hashes(r.prompt_token_ids()[: full * block_size], block_size, r.cache_salt)[0]
        keys.append(k)
        matchable.append(max(n - 1, 0) // block_size)
        weights.append([block_size] * full)
    return keys, matchable, weights


def lru_curve_of(workload: Workload, block_size: int):
    """The one-pass LRU curve of the workload's prompts at this block size (curve.py's `Curve`)."""
    from kvtui.whatif.curve import lru_curve

    keys, matchable, weights = block_keys(workload, block_size)
    return lru_curve(keys, matchable=matchable, weights=weights)


def lru_points(workload: Workload, block_size: int, capacities_tokens: list[int]) -> list[int]:
    """Hit tokens of the one-pass LRU curve at each capacity (tokens)."""
    curve = lru_curve_of(workload, block_size)
    return [curve.hit_tokens(c // block_size) for c in capacities_tokens]


def dense_points(curve, block_size: int, prompt_tokens: int, n: int = 48) -> list[dict]:
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


def optimal_points(workload: Workload, block_size: int, capacities_tokens: list[int]) -> list[int]:
    """Hit tokens of Belady's bound at each capacity (tokens)."""
    from kvtui.whatif.optimal import belady

    keys, matchable, weights = block_keys(workload, block_size)
    points = belady(keys, [c // block_size for c in capacities_tokens], matchable=matchable, weights=weights)
    return [p.hit_tokens for p in points]
