"""Latency measures from the seeds: TTFT, TPOT, ITL, and their percentiles."""

from __future__ import annotations

import math
from typing import Sequence

PERCENTILES = (50, 95, 99)


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


def tpot(token_times: Sequence[float]) -> float | None:
    """(t_last - t_first) / (n - 1): undefined for a single token."""
    if len(token_times) < 2:
        return None
    return (token_times[-1] - token_times[0]) / (len(token_times) - 1)


def inter_token_latencies(token_times: Sequence[float]) -> list[float]:
    return [b - a for a, b in zip(token_times, token_times[1:])]
