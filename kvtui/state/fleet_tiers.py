"""The tiers of an attached cache: where a worker holds a block, named from the `medium` its events carry.

vLLM publishes GPU (its block pool), CPU and STORAGE (its offloading connectors; the Mooncake store connector
writes "cpu"); SGLang GPU, CPU_PINNED (HiCache's host pool), DISK and EXTERNAL; LMCache passes its own. A tier is
the medium upper-cased (so "cpu" and "CPU" are one tier), GPU when the event gives none. vLLM's secondary
offloading tiers also name an `ownership` (KVCR's "kvcr"): their copies are held and removed apart from the
primary tier's on the same medium, so the tier is MEDIUM/ownership.
"""

from __future__ import annotations

GPU = "GPU"
# fastest first; any other medium sorts after these, by name
ORDER = ("GPU", "CPU", "CPU_PINNED", "STORAGE", "DISK", "EXTERNAL")
_RANK = {name: i for i, name in enumerate(ORDER)}
# (medium, ownership) -> tier name; a publisher sends a handful
_NAMES: dict[tuple, str] = {}


def tier_name(medium: str | None, ownership: str | None = None) -> str:
    name = _NAMES.get((medium, ownership))
    if name is None:
        base = medium.strip().upper() if medium and medium.strip() else GPU
        name = f"{base}/{ownership}" if ownership else base
        _NAMES[(medium, ownership)] = name
    return name


def tier_rank(tier: str) -> tuple:
    base = tier.split("/", 1)[0]
    return (_RANK.get(base, len(ORDER)), tier)


def ordered(tiers) -> list[str]:
    """Tiers fastest first (GPU, then host memory, then storage)."""
    return sorted(tiers, key=tier_rank)


def fastest(tiers) -> str:
    """The tier a hit would be served from: the fastest that holds the block."""
    return min(tiers, key=tier_rank)


def tiers_text(counts: dict) -> str:
    """`GPU 12 · CPU 40`: counts by tier, fastest first, zeros left out."""
    return " · ".join(f"{tier} {counts[tier]:,}" for tier in ordered(counts) if counts[tier])
