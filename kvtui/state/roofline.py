"""Prefill vs decode on this machine's roofline: torch-free arithmetic on a trace's `roofline` and `step` events.

A forward over n tokens must read every weight once (memory: weight_bytes / bandwidth, whatever n) and do
flops_per_token x n multiply-adds (compute: n x flops_per_token / peak). Its time is at least the larger:

    t(n) >= max(weight_bytes / bandwidth, n x flops_per_token / peak_flops)

The two meet at the ridge n* = weight_bytes x peak / (bandwidth x flops_per_token) tokens. A decode step (one
token per running request, n small) sits on the flat memory floor: its time does not grow with the context,
so TPOT stays flat. A prefill of a T-token prompt sits on the compute slope once T > n*: its time grows with T,
and TTFT with it.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass


@dataclass(frozen=True)
class Roofline:
    # bytes/s
    mem_bandwidth: float
    # FLOP/s
    peak_flops: float
    weight_bytes: int
    flops_per_token: int
    device: str = ""
    dtype: str = ""

    @classmethod
    def from_event(cls, ev: dict) -> Roofline:
        return cls(
            ev["mem_bandwidth"],
            ev["peak_flops"],
            ev["weight_bytes"],
            ev["flops_per_token"],
            ev.get("device", ""),
            ev.get("dtype", ""),
        )

    @property
    def memory_floor(self) -> float:
        """Seconds to read the weights once: the least any forward can take."""
        return self.weight_bytes / self.mem_bandwidth

    @property
    def per_token(self) -> float:
        """Seconds of compute per token at peak."""
        return self.flops_per_token / self.peak_flops

    @property
    def ridge(self) -> float:
        """Tokens per step where compute time equals the memory floor."""
        return self.memory_floor / self.per_token

    def bound(self, tokens: int) -> float:
        return max(self.memory_floor, tokens * self.per_token)


@dataclass(frozen=True)
class StepPoint:
    # events applied when the step event is visible (cursor position)
    index: int
    step: int
    tokens: int
    # prefill chunks in the step
    prefill: int
    # decode requests in the step
    decode: int
    duration: float

    @property
    def kind(self) -> str:
        return "decode" if not self.prefill else ("prefill" if not self.decode else "mixed")


class RooflineScan:
    """Step points and the roofline event of an append-only event list, scanned once (live traces grow)."""

    def __init__(self) -> None:
        self.events: list[dict] | None = None
        self.scanned = 0
        self.points: list[StepPoint] = []
        self.roofline: Roofline | None = None

    def update(self, events: list[dict]) -> None:
        if events is not self.events:
            self.__init__()
            self.events = events
        for i in range(self.scanned, len(events)):
            ev = events[i]
            etype = ev["type"]
            if etype == "step":
                self.points.append(
                    StepPoint(
                        i + 1,
                        ev["step"],
                        ev["num_tokens"],
                        ev["num_prefill"],
                        ev["num_decode"],
                        ev["duration"],
                    )
                )
            elif etype == "roofline" and self.roofline is None:
                self.roofline = Roofline.from_event(ev)
        self.scanned = len(events)

    def upto(self, cursor: int) -> list[StepPoint]:
        """The steps visible after `cursor` events."""
        return self.points[: bisect_left(self.points, cursor + 1, key=lambda p: p.index)]


def log_position(value: float, lo: float, hi: float, cells: int) -> int:
    """Cell 0..cells-1 of `value` on a log axis from lo to hi."""
    if value <= lo or hi <= lo:
        return 0
    frac = math.log(value / lo) / math.log(hi / lo)
    return max(0, min(cells - 1, int(round(frac * (cells - 1)))))
