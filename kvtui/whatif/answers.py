"""The questions people ask of a curve, answered from it: "how much KV for 80% of the ceiling?"

    targets(curve, block_size, [0.5, 0.8, 0.9], bytes_per_token, prompt_tokens)
    -> [{"fraction_of_ceiling": 0.8, "capacity_tokens": ..., "capacity_bytes": ..., "token_hit_rate": ...,
         "ceiling_token_hit_rate": ...}]

The answer is the smallest capacity (whole blocks) at which the one-pass LRU curve reaches that share of its
own ceiling (every block seen before hits): exact for the one-pass model, read off the curve in one binary
search. Bytes come from the model's KV bytes per token (`--kv-config`), else null.
"""

from __future__ import annotations

from kvtui.whatif.capacity import kv_bytes_of
from kvtui.whatif.curve import Curve


def targets(
    curve: Curve,
    block_size: int,
    fractions,
    bytes_per_token: float | None = None,
    prompt_tokens: int | None = None,
) -> list[dict]:
    """Hit rates are of `prompt_tokens` (the workload's, partly filled last blocks included), else of the
    curve's whole blocks."""
    out = []
    total = prompt_tokens or curve.total_tokens
    for fraction in fractions:
        blocks = curve.smallest_reaching(fraction * curve.ceiling_tokens)
        tokens = None if blocks is None else blocks * block_size
        out.append(
            {
                "fraction_of_ceiling": fraction,
                "capacity_tokens": tokens,
                "capacity_bytes": kv_bytes_of(tokens, bytes_per_token),
                "token_hit_rate": curve.hit_tokens(blocks) / total if blocks is not None and total else None,
                "ceiling_token_hit_rate": curve.ceiling_tokens / total if total else 0.0,
            }
        )
    return out


def parse_targets(text: str) -> list[float]:
    """`80%,0.9` into fractions of the ceiling; ValueError saying what is wrong."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            value = float(part[:-1]) / 100 if part.endswith("%") else float(part)
        except ValueError:
            raise ValueError(f"{part!r}: write a share of the ceiling as 80% or 0.8") from None
        if not 0 < value <= 1:
            raise ValueError(f"{part!r}: a share of the ceiling is above 0 and at most 100%")
        out.append(value)
    if not out:
        raise ValueError("give at least one share of the ceiling, e.g. 80%")
    return out
