"""The stated cost model that turns engine steps into seconds, so that arrivals interleave with steps and the
scheduler's admission, chunking and preemption happen when they would.

    step seconds = per_step + per_prefill_token x prefill tokens + per_decode_row x decode rows

Defaults (a mid-size model on one modern GPU, order of magnitude only): 5 ms per step, 25 us per prefill
token (40k tokens/s), 0.2 ms per decode row. Nothing else depends on them: hit rates move only through
how many requests run at once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostModel:
    per_step: float = 0.005
    per_prefill_token: float = 25e-6
    per_decode_row: float = 0.0002

    def step_seconds(self, prefill_tokens: int, decode_rows: int) -> float:
        return self.per_step + self.per_prefill_token * prefill_tokens + self.per_decode_row * decode_rows

    def describe(self) -> str:
        return (
            f"step = {self.per_step * 1e3:g} ms + {self.per_prefill_token * 1e6:g} us x prefill token + "
            f"{self.per_decode_row * 1e3:g} ms x decode row"
        )

    def as_dict(self) -> dict:
        return {
            "per_step": self.per_step,
            "per_prefill_token": self.per_prefill_token,
            "per_decode_row": self.per_decode_row,
        }
