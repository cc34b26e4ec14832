"""Capacities as people write them, into tokens: `100k,3M,50M` (tokens, k/M/G = 10^3/10^6/10^9), `4096b`
(blocks of the run's block size), `80GiB` / `80GB` (bytes: needs the model's KV bytes per token, from
`--kv-config DIR|config.json` through engine/models/kv_budget.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

TOKEN_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}
BYTE_SUFFIX = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
# the simulator keeps a list entry per block: past this a sweep needs gigabytes before its first step
MAX_BLOCKS = 10**7
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


class CapacityError(ValueError):
    pass


@dataclass(frozen=True)
class Capacity:
    """A capacity as asked (`1k`, `80GiB`) and what it became: whole blocks of the run's block size."""

    asked: str
    tokens: int
    block_size: int
    # the tokens the text stands for before rounding down to whole blocks
    exact: float
    # given in bytes (80GiB): its tokens depend on the K/V bytes per token
    in_bytes: bool = False

    @property
    def rounded(self) -> bool:
        return self.tokens != self.exact


def capacity_of(text: str, block_size: int, bytes_per_token: float | None = None) -> Capacity:
    """One capacity: the text, and the tokens it becomes (a whole number of blocks, rounded down, at least one
    block)."""
    match = _PATTERN.match(text)
    if not match:
        raise CapacityError(f"capacity {text!r}: write tokens (100k, 3M), blocks (4096b) or bytes (80GiB)")
    value, suffix = float(match.group(1)), match.group(2).lower()
    if suffix == "b":
        tokens = value * block_size
    elif suffix in TOKEN_SUFFIX:
        tokens = value * TOKEN_SUFFIX[suffix]
    elif suffix in BYTE_SUFFIX:
        if not bytes_per_token:
            raise CapacityError(
                f"capacity {text!r} is in bytes: pass --kv-config DIR|config.json so that "
                "bytes become tokens (the model's KV bytes per token)"
            )
        tokens = value * BYTE_SUFFIX[suffix] / bytes_per_token
    else:
        raise CapacityError(
            f"capacity {text!r}: unknown suffix {match.group(2)!r} (k, M, G tokens; b blocks; "
            "KiB..TiB or KB..TB bytes)"
        )
    blocks = int(tokens // block_size)
    if blocks < 1:
        raise CapacityError(f"capacity {text!r} is less than one block of {block_size} tokens")
    if blocks > MAX_BLOCKS:
        raise CapacityError(
            f"capacity {text!r} is {blocks:,} blocks of {block_size} tokens: give at most {MAX_BLOCKS:,} blocks "
            "(a cache larger than the workload's tokens gives the ceiling anyway)"
        )
    return Capacity(text, blocks * block_size, block_size, tokens, suffix in BYTE_SUFFIX and suffix != "b")


def parse_capacity(text: str, block_size: int, bytes_per_token: float | None = None) -> int:
    """One capacity in tokens (a whole number of blocks, rounded down, at least one block)."""
    return capacity_of(text, block_size, bytes_per_token).tokens


def capacities_of(text: str, block_size: int, bytes_per_token: float | None = None) -> list[Capacity]:
    return [capacity_of(part, block_size, bytes_per_token) for part in text.split(",") if part.strip()]


def kv_bytes_of(tokens: int | None, bytes_per_token: float | None) -> int | None:
    """The K/V bytes of `tokens` at `bytes_per_token` (None when either is unknown): every byte figure of a
    what-if report comes from here."""
    if tokens is None or not bytes_per_token:
        return None
    return round(tokens * bytes_per_token)


def parse_capacities(text: str, block_size: int, bytes_per_token: float | None = None) -> list[int]:
    return [c.tokens for c in capacities_of(text, block_size, bytes_per_token)]


def human_tokens(tokens: float) -> str:
    for unit, size in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        # a capacity rounded down to whole blocks (999,936 for 1M at 512) still reads as 1M
        if tokens >= size * 0.995:
            return f"{tokens / size:.3g}{unit}"
    return f"{tokens:g}"


def human_bytes(n: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"
