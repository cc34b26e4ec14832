"""Every measure kvtui reports, computed one way: hit rates, percentiles, TTFT / TPOT / ITL. Torch-free: the
engine, `kvtui stats`, the UI and the benchmarks all import it.

Hit rates. Per prefix lookup (a request's first admission, or an edit: a preemption's readmission is not a
new lookup) four counts:
    matchable_tokens  prompt tokens that could match: all but the last, which is always computed;
    hit_tokens        prompt tokens served from the cache;
    block_lookups     full blocks the prompt could match: matchable_tokens // block_size;
    block_hits        of those, blocks found in the cache: hit_tokens // block_size.
Rates:
    token hit rate    = hit tokens / matchable tokens
    request hit rate  = lookups with any hit / lookups
    block hit rate    = block hits / block lookups
A rate with nothing to divide by (no requests yet, only one-token prompts) is 0.0. The window rates are the
same sums over the last N lookups only: cumulative rates drift slowly, the window shows what changed lately.

Latency (seconds), per request:
    TTFT  arrival (or the edit that restarted it) to its first token, as the engine measured it;
    TPOT  (t_last - t_first) / (n - 1) over the tokens since that start; none for a single token;
    ITL   each gap between consecutive tokens of one request (none across an edit).
A request edited after it finished counts once, with its latest run. Percentiles interpolate linearly between
the closest ranks (numpy's default): p50 of [1, 2, 3, 4] is 2.5.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

PERCENTILES = (50, 95, 99)


# --------------------------------------------------------------------------------------------- hit rates
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
        return (
            self.matchable_tokens,
            self.hit_tokens,
            self.block_lookups,
            self.block_hits,
            self.requests,
            self.hit_requests,
        )

    @classmethod
    def lookup(cls, prompt_tokens: int, hit_tokens: int, block_size: int) -> HitCounts:
        """One prefix lookup of a `prompt_tokens` prompt that found `hit_tokens` cached."""
        matchable = max(0, prompt_tokens - 1)
        blocks = (lambda n: n // block_size) if block_size > 0 else (lambda n: 0)
        return cls(matchable, hit_tokens, blocks(matchable), blocks(hit_tokens), 1, int(hit_tokens > 0))

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
        return {
            "token_hit_rate": self.token_hit_rate,
            "request_hit_rate": self.request_hit_rate,
            "block_hit_rate": self.block_hit_rate,
        }

    def as_dict(self) -> dict[str, int]:
        return {
            "matchable_tokens": self.matchable_tokens,
            "hit_tokens": self.hit_tokens,
            "block_lookups": self.block_lookups,
            "block_hits": self.block_hits,
            "lookups": self.requests,
            "hit_lookups": self.hit_requests,
        }


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def is_lookup(prefix_match: dict) -> bool:
    """Whether a `prefix_match` event counts in the hit rates (a preemption's readmission does not)."""
    return not (prefix_match.get("detail") or {}).get("readmission")


class HitRateTracker:
    def __init__(self, window: int = 32, tiers: Sequence[str] = ()):
        if window < 1:
            raise ValueError(f"the hit-rate window needs at least one request (got {window})")
        self.window = window
        # with lower tiers: hit tokens by the tier that served them (a partly reused block counts as device)
        self.tier_hits = {tier: 0 for tier in tiers}
        self.total = HitCounts()
        self.windowed = HitCounts()
        self._recent: deque[HitCounts] = deque()

    def record(
        self, matchable_tokens: int, hit_tokens: int, block_lookups: int, block_hits: int
    ) -> HitCounts:
        """Count one request's prefix lookup; returns its counts."""
        if not (0 <= hit_tokens <= matchable_tokens and 0 <= block_hits <= block_lookups):
            raise ValueError(
                f"hit counts out of range: {hit_tokens}/{matchable_tokens} tokens, "
                f"{block_hits}/{block_lookups} blocks"
            )
        return self.add(
            HitCounts(matchable_tokens, hit_tokens, block_lookups, block_hits, 1, int(hit_tokens > 0))
        )

    def add(self, one: HitCounts) -> HitCounts:
        self.total += one
        # Keep running sums so an update costs O(1) whatever the window size.
        self._recent.append(one)
        self.windowed += one
        if len(self._recent) > self.window:
            self.windowed -= self._recent.popleft()
        return one

    def record_match(self, match) -> HitCounts:
        """`record` from an engine.core.miss_explainer.PrefixMatch (duck-typed: this module imports nothing of the engine)."""
        if self.tier_hits and match.tiers is not None:
            for tier in match.tiers:
                self.tier_hits[tier] += match.block_size
            self.tier_hits["device"] += match.partial_tokens
        return self.record(match.matchable_tokens, match.num_tokens, match.block_lookups, len(match.blocks))

    def event_fields(self) -> dict:
        """Fields of the `hit_rates` trace event."""
        fields = {
            **self.total.rates(),
            "window": {"n": len(self._recent), "size": self.window, **self.windowed.rates()},
        }
        if self.tier_hits:
            fields["tiers"] = {tier: {"hit_tokens": n} for tier, n in self.tier_hits.items()}
        return fields


# --------------------------------------------------------------------------------------------- latency
def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def percentiles(values: Sequence[float], qs: Sequence[float] = PERCENTILES) -> dict[str, float | None]:
    return {f"p{q:g}": percentile(values, q) for q in qs}


def summary(values: Sequence[float], qs: Sequence[float] = PERCENTILES) -> dict[str, float | int | None]:
    """{"n": count, "p50": ..., "p95": ..., "p99": ...}: what every view and `kvtui stats --json` report."""
    return {"n": len(values), **percentiles(values, qs)}


def tpot(token_times: Sequence[float]) -> float | None:
    """(t_last - t_first) / (n - 1): undefined for a single token."""
    if len(token_times) < 2:
        return None
    return (token_times[-1] - token_times[0]) / (len(token_times) - 1)


@dataclass
class RequestLatency:
    arrived: float
    ttft: float | None = None
    tpot: float | None = None
    last_token: float | None = None


@dataclass
class LatencyTracker:
    """TTFT, TPOT and ITL from trace events (the definitions in the module docstring), fed in trace order."""

    requests: dict[str, RequestLatency] = field(default_factory=dict)
    itl: list[float] = field(default_factory=list)

    def arrived(self, request_id: str, t: float) -> None:
        self.requests[request_id] = RequestLatency(t)

    def token(self, request_id: str, t: float) -> None:
        req = self.requests.get(request_id)
        if req is None:
            return
        if req.ttft is None:
            # until the engine's own figure arrives with request_finished
            req.ttft = t - req.arrived
        if req.last_token is not None:
            self.itl.append(t - req.last_token)
        req.last_token = t

    def edited(self, request_id: str) -> None:
        req = self.requests.get(request_id)
        if req is not None:
            # no inter-token latency across an edit
            req.last_token = None

    def finished(self, request_id: str, ttft: float | None, tpot_value: float | None) -> None:
        req = self.requests.get(request_id)
        if req is None:
            return
        if ttft is not None:
            req.ttft = ttft
        req.tpot = tpot_value

    def ttfts(self) -> list[float]:
        return [r.ttft for r in self.requests.values() if r.ttft is not None]

    def tpots(self) -> list[float]:
        return [r.tpot for r in self.requests.values() if r.tpot is not None]


def latency_summaries(ttft: Sequence[float], tpot_values: Sequence[float], itl: Sequence[float]) -> dict:
    """{"ttft": summary, "tpot": summary, "itl": summary}, seconds."""
    return {"ttft": summary(ttft), "tpot": summary(tpot_values), "itl": summary(itl)}
