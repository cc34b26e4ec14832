"""K/V precisions of a what-if run (`--kv-config` with `--kv-dtype`): each capacity row is at one precision,
and its bytes are its tokens x that precision's bytes per token (capacity.py's `kv_bytes_of`).

    plan = capacity_plan("1k,80GiB", [16], {"bfloat16": 131072, "fp8": 67584})
    plan.caps        {16: [992, 655360, 1270992]}      the token capacities to run (each once)
    plan.rows        {(16, 992): (bf16, fp8), (16, 655360): (bf16,), ...}  the precisions each was asked at
    plan.rounded     the capacities rounded down to whole blocks (a note says what each became)

The simulation does not depend on the precision (a cache of N tokens behaves the same at any byte size), so a
capacity is run once and its point is shown once per precision it was asked at.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvtui.whatif.capacity import Capacity, capacities_of, kv_bytes_of


@dataclass(frozen=True)
class Precision:
    kv_dtype: str
    bytes_per_token: int


@dataclass
class CapacityPlan:
    # block size -> token capacities, in the order asked, each once
    caps: dict[int, list[int]] = field(default_factory=dict)
    # (block size, tokens) -> the precisions that capacity was asked at (empty without --kv-config)
    rows: dict[tuple[int, int], tuple[Precision, ...]] = field(default_factory=dict)
    # every capacity rounded down to whole blocks, with the precision it was read at (None: tokens)
    rounded: list[tuple[Capacity, Precision | None]] = field(default_factory=list)
    precisions: tuple[Precision, ...] = ()


def capacity_plan(text: str, sizes: list[int], precisions: list[Precision]) -> CapacityPlan:
    """Every capacity of `text` at every block size and precision (CapacityError when one is bad)."""
    plan = CapacityPlan(precisions=tuple(precisions))
    for bs in sizes:
        caps: dict[int, list[Precision]] = {}
        for precision in precisions or [None]:
            for capacity in capacities_of(text, bs, precision.bytes_per_token if precision else None):
                at = caps.setdefault(capacity.tokens, [])
                if precision is not None and precision not in at:
                    at.append(precision)
                # a token or block capacity is the same at every precision
                read_at = precision if capacity.in_bytes else None
                if capacity.rounded and (capacity, read_at) not in plan.rounded:
                    plan.rounded.append((capacity, read_at))
        plan.caps[bs] = list(caps)
        plan.rows.update({(bs, tokens): tuple(at) for tokens, at in caps.items() if at})
    return plan


def rounded_entries(plan: CapacityPlan) -> list[dict]:
    """The report's `capacities_rounded`: each capacity rounded down to whole blocks, as asked and as run."""
    return [
        {
            "asked": capacity.asked.strip(),
            "capacity_tokens": capacity.tokens,
            "block_size": capacity.block_size,
            "kv_dtype": precision.kv_dtype if precision is not None else None,
        }
        for capacity, precision in plan.rounded
    ]


def rounded_line(entry: dict) -> str:
    """What a capacity rounded down to whole blocks became: `1k -> 992 tokens (62 blocks of 16)`."""
    tokens, bs = entry["capacity_tokens"], entry["block_size"]
    at = f" at {entry['kv_dtype']}" if entry.get("kv_dtype") else ""
    tier = f"{entry['tier']} " if entry.get("tier") else ""
    return f"{tier}{entry['asked']}{at} -> {tokens:,} tokens ({tokens // bs:,} blocks of {bs})"


def at_precisions(points: list[dict], rows: dict) -> list[dict]:
    """Each point once per precision its capacity was asked at, with that precision's name and bytes."""
    if not rows:
        return points
    out = []
    for point in points:
        at = rows.get((point["block_size"], point["capacity_tokens"]))
        if not at:
            out.append(point)
            continue
        for precision in at:
            out.append(
                {
                    **point,
                    "kv_dtype": precision.kv_dtype,
                    "capacity_bytes": kv_bytes_of(point["capacity_tokens"], precision.bytes_per_token),
                }
            )
    return out
