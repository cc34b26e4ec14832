"""The stated cost model that turns engine steps into seconds, so that arrivals interleave with steps and the
scheduler's admission, chunking and preemption happen when they would.

    step seconds = per_step + per_prefill_token x prefill tokens + per_decode_row x decode rows
                   + per_host_token x tokens loaded from host + per_disk_token x tokens loaded from disk

Defaults (a mid-size model on one modern GPU, order of magnitude only): 5 ms per step, 25 us per prefill
token (40k tokens/s), 0.2 ms per decode row; a load from a lower tier (--host-capacity) costs the model's K/V
bytes per token over the tier's bandwidth (tier_cost.py), nothing without --kv-config. Nothing else depends on
them: hit rates move only through how many requests run at once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CostModel:
    per_step: float = 0.005
    per_prefill_token: float = 25e-6
    per_decode_row: float = 0.0002
    # seconds to load one token's K/V back to the device from host / disk (0: not charged)
    per_host_token: float = 0.0
    per_disk_token: float = 0.0

    def step_seconds(self, prefill_tokens: int, decode_rows: int) -> float:
        return self.per_step + self.per_prefill_token * prefill_tokens + self.per_decode_row * decode_rows

    def load_seconds(self, tier: str, tokens: int) -> float:
        return (self.per_host_token if tier == "host" else self.per_disk_token) * tokens

    def describe(self) -> str:
        loads = "".join(
            f" + {per * 1e6:.3g} us x token loaded from {tier}"
            for tier, per in (("host", self.per_host_token), ("disk", self.per_disk_token))
            if per
        )
        return (
            f"step = {self.per_step * 1e3:g} ms + {self.per_prefill_token * 1e6:g} us x prefill token + "
            f"{self.per_decode_row * 1e3:g} ms x decode row" + loads
        )

    def as_dict(self) -> dict:
        return {
            "per_step": self.per_step,
            "per_prefill_token": self.per_prefill_token,
            "per_decode_row": self.per_decode_row,
            "per_host_token": self.per_host_token,
            "per_disk_token": self.per_disk_token,
        }
