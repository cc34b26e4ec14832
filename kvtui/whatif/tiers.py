"""Hits per tier of an exclusive LRU hierarchy (device, host, disk), read off the one-pass curve.

    split = tier_split(curve, device_blocks, host_blocks, disk_blocks)   # hit tokens per tier
    tier_points(curve, ...)      # one report point per device x host x disk capacity
    tier_surface(curve, ...)     # the hit rate over a log-spaced device x host grid (the UI's heat map)

Why one pass is enough: in an exclusive hierarchy where the device evicts its least recently used block to
the host, the host evicts to disk, disk drops, and a hit in a lower tier moves the block back to the device,
the tiers together hold the C1 + C2 + C3 most recently used blocks, the device the C1 most recent of them and
the host the next C2. A block at stack position p (1 = the most recent) is on the device when p <= C1, on the
host when C1 < p <= C1 + C2, on disk when C1 + C2 < p <= C1 + C2 + C3. Along a request's matched prefix the
positions increase (the curve's running maximum is the block's own position), so the prefix hits while it
stays within all three tiers, device first, and the split is three reads of the curve:

    device = hits(C1), host = hits(C1 + C2) - hits(C1), disk = hits(C1 + C2 + C3) - hits(C1 + C2)

The one-pass model's assumptions (curve.py) apply: whole blocks, one request at a time, no pinning.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtui.whatif.curve import Curve
from kvtui.whatif.tier_cost import TierCost

TIERS = ("device", "host", "disk")


@dataclass(frozen=True)
class TierSplit:
    """Hit tokens served from each tier."""

    device: int
    host: int
    disk: int

    @property
    def total(self) -> int:
        return self.device + self.host + self.disk

    def rates(self, prompt_tokens: int) -> dict:
        return {t: getattr(self, t) / prompt_tokens if prompt_tokens else 0.0 for t in TIERS}


def tier_split(curve: Curve, device_blocks: int, host_blocks: int, disk_blocks: int = 0) -> TierSplit:
    device = curve.hit_tokens(device_blocks)
    with_host = curve.hit_tokens(device_blocks + host_blocks)
    with_disk = curve.hit_tokens(device_blocks + host_blocks + disk_blocks)
    return TierSplit(device, with_host - device, with_disk - with_host)


def priced(point: dict, split: TierSplit, cost: TierCost, trace_seconds: float) -> dict:
    """The point with its tiers' figures: rates per tier, prefill seconds saved against the device-only run,
    GPU-hours and money per day of trace."""
    saved = cost.seconds_saved(split.host, split.disk)
    point["prefill_seconds_saved"] = saved
    point.update(cost.per_day(saved, trace_seconds))
    return point


def price_simulated(points: list[dict], cost: TierCost, prompt_tokens: int, trace_seconds: float) -> None:
    """Simulated points with tiers get the one-pass points' figures, from the hit tokens each tier served at
    admission (a preempted request's tokens computed again are misses of the hit rate, not of its tier)."""
    for point in points:
        hits = point.pop("tier_hit_tokens", None)
        if hits is None:
            continue
        split = TierSplit(hits["device"], hits["host"], hits["disk"])
        point["tiers"] = split.rates(prompt_tokens)
        priced(point, split, cost, trace_seconds)


def tier_points(
    curve: Curve,
    block_size: int,
    devices: list[int],
    hosts: list[int],
    disks: list[int],
    prompt_tokens: int,
    cost: TierCost,
    trace_seconds: float,
) -> list[dict]:
    """One one-pass point per device x host x disk capacity (tokens; `disks` [0] when there is no disk)."""
    ceiling = curve.ceiling_tokens
    points = []
    for device in devices:
        for host in hosts:
            for disk in disks:
                split = tier_split(curve, device // block_size, host // block_size, disk // block_size)
                point = {
                    "capacity_tokens": device,
                    "host_capacity_tokens": host,
                    "disk_capacity_tokens": disk,
                    "block_size": block_size,
                    "eviction": "lru",
                    "method": "one-pass",
                    "token_hit_rate": split.total / prompt_tokens if prompt_tokens else 0.0,
                    "tiers": split.rates(prompt_tokens),
                    "misses": {
                        "capacity": ceiling - split.total,
                        "compulsory_or_structural": prompt_tokens - ceiling,
                    },
                }
                points.append(priced(point, split, cost, trace_seconds))
    return points


def log_grid(top_blocks: int, n: int, zero: bool = False) -> list[int]:
    """About n log-spaced block counts from 1 to top_blocks (0 first when `zero`: the tier left out)."""
    top = max(top_blocks, 1)
    grid = sorted({max(1, round(top ** (i / max(n - 1, 1)))) for i in range(n)})
    return [0, *grid] if zero else grid


def tier_surface(
    curve: Curve, block_size: int, disk: int, prompt_tokens: int, cost: TierCost, n: int = 9
) -> dict:
    """The total hit rate over a device x host grid (log-spaced up to where the curve is flat; host 0 is the
    device-only run) at one disk capacity, and the prefill seconds saved at each cell when priced."""
    devices = log_grid(curve.distinct_blocks, n)
    hosts = log_grid(curve.distinct_blocks, n, zero=True)
    rates, saved = [], []
    for d in devices:
        row_rates, row_saved = [], []
        for h in hosts:
            split = tier_split(curve, d, h, disk // block_size)
            row_rates.append(split.total / prompt_tokens if prompt_tokens else 0.0)
            row_saved.append(cost.seconds_saved(split.host, split.disk))
        rates.append(row_rates)
        saved.append(row_saved)
    return {
        "device_tokens": [d * block_size for d in devices],
        "host_tokens": [h * block_size for h in hosts],
        "disk_tokens": disk,
        "token_hit_rate": rates,
        "prefill_seconds_saved": saved if cost.priced else None,
    }


def tier_curve(curve: Curve, block_size: int, host: int, disk: int, prompt_tokens: int, n: int = 48) -> list:
    """Each tier's share of the hits against the device capacity, at the current host and disk capacities
    (the UI's curve per tier: device alone, + host, + disk)."""
    out = []
    for d in log_grid(curve.distinct_blocks, n):
        split = tier_split(curve, d, host // block_size, disk // block_size)
        out.append({"capacity_tokens": d * block_size, **split.rates(prompt_tokens)})
    return out


@dataclass(frozen=True)
class TierOptions:
    """--host-capacity and --disk-capacity per block size (tokens; disks [0]: no disk tier), and the cost."""

    hosts: dict[int, list[int]]
    disks: dict[int, list[int]]
    cost: TierCost
    # the capacities rounded down to whole blocks: {"tier", "asked", "capacity_tokens", "block_size", ...}
    rounded: tuple = ()

    def with_loads(self, clock):
        """The simulation's cost clock (cost.py's CostModel) charging this cost model's loads."""
        from dataclasses import replace

        return replace(
            clock,
            per_host_token=self.cost.load_seconds_per_token("host") or 0.0,
            per_disk_token=self.cost.load_seconds_per_token("disk") or 0.0,
        )

    def current(self, block_size: int) -> tuple[int, int]:
        """The first host and disk capacities: the current configuration's."""
        return self.hosts[block_size][0], self.disks[block_size][0]


def tier_section(curve: Curve, block_size: int, tiers: TierOptions, prompt_tokens: int, span: float) -> dict:
    """The report's `tiers`: the assumptions, the trace's span, the current host and disk capacities, the
    curve per tier and the surface."""
    host, disk = tiers.current(block_size)
    return {
        "assumptions": tiers.cost.as_dict(),
        "notes": tiers.cost.describe(),
        "trace_seconds": span,
        "current": {"host_capacity_tokens": host, "disk_capacity_tokens": disk},
        "curve": tier_curve(curve, block_size, host, disk, prompt_tokens),
        "surface": tier_surface(curve, block_size, disk, prompt_tokens, tiers.cost),
    }
