"""Prefix-cache hit rates, cumulative and over a sliding window of the last N requests.

Per request the engine records four counts (from its `PrefixMatch`):
    matchable_tokens  prompt tokens that could match: all but the last, which is always computed;
    hit_tokens        prompt tokens served from the cache (whole blocks);
    block_lookups     full blocks the prompt could match: matchable_tokens // block_size;
    block_hits        of those, blocks found in the cache.
Rates:
    token hit rate    = hit tokens / matchable tokens
    request hit rate  = requests with any hit / requests
    block hit rate    = block hits / block lookups
A rate with nothing to divide by (no requests yet, only one-token prompts) is 0.0. The window rates are the
same sums over the last N requests only: cumulative rates drift slowly, the window shows what changed lately.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class HitCounts:
    matchable_tokens: int = 0
    hit_tokens: int = 0
    block_lookups: int = 0
    block_hits: int = 0
    requests: int = 0
    hit_requests: int = 0

    def __add__(self, other: HitCounts) -> HitCounts:
        return HitCounts(*(a + b for a, b in zip(self._values(), other._values())))

    def __sub__(self, other: HitCounts) -> HitCounts:
        return HitCounts(*(a - b for a, b in zip(self._values(), other._values())))

    def _values(self) -> tuple[int, ...]:
        return (self.matchable_tokens, self.hit_tokens, self.block_lookups, self.block_hits, self.requests,
                self.hit_requests)

    @property
    def token_hit_rate(self) -> float:
        return _rate(self.hit_tokens, self.matchable_tokens)

    @property
    def request_hit_rate(self) -> float:
        return _rate(self.hit_requests, self.requests)

    @property
    def block_hit_rate(self) -> float:
        return _rate(self.block_hits, self.block_lookups)

    def rates(self) -> dict[str, float]:
        return {"token_hit_rate": self.token_hit_rate, "request_hit_rate": self.request_hit_rate,
                "block_hit_rate": self.block_hit_rate}


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


class HitRateTracker:
    def __init__(self, window: int = 32):
        if window < 1:
            raise ValueError(f"the hit-rate window needs at least one request (got {window})")
        self.window = window
        self.total = HitCounts()
        self.windowed = HitCounts()
        self._recent: deque[HitCounts] = deque()

    def record(self, matchable_tokens: int, hit_tokens: int, block_lookups: int, block_hits: int) -> HitCounts:
        """Count one request's prefix lookup; returns its counts."""
        if not (0 <= hit_tokens <= matchable_tokens and 0 <= block_hits <= block_lookups):
            raise ValueError(f"hit counts out of range: {hit_tokens}/{matchable_tokens} tokens, "
                             f"{block_hits}/{block_lookups} blocks")
        one = HitCounts(matchable_tokens, hit_tokens, block_lookups, block_hits, 1, int(hit_tokens > 0))
        self.total += one
        # Keep running sums so an update costs O(1) whatever the window size.
        self._recent.append(one)
        self.windowed += one
        if len(self._recent) > self.window:
            self.windowed -= self._recent.popleft()
        return one

    def record_match(self, match) -> HitCounts:
        """`record` from an engine.radix.PrefixMatch (duck-typed: this module imports nothing of the engine)."""
        return self.record(match.matchable_tokens, match.num_tokens, match.block_lookups, len(match.blocks))

    def event_fields(self) -> dict:
        """Fields of the `hit_rates` trace event."""
        return {**self.total.rates(), "window": {"n": len(self._recent), "size": self.window,
                                                 **self.windowed.rates()}}
