"""The tier table of `kvtui whatif --host-capacity ...`: each device x host x disk point's token hit rate per
tier, the prefill seconds it saves against the device-only run, and GPU-hours and money per day of trace."""

from __future__ import annotations

import math

from kvtui.whatif.capacity import human_tokens


def point_key(point: dict) -> tuple:
    """What names a configuration's capacities: device, block size, host and disk, and the K/V precision."""
    return (
        point["capacity_tokens"],
        point["block_size"],
        point.get("host_capacity_tokens", 0),
        point.get("disk_capacity_tokens", 0),
        point.get("kv_dtype"),
    )


def capacity_label(point: dict) -> str:
    """The device capacity, and host and disk below it when there are any: `300k+1M+10M`."""
    parts = [
        point["capacity_tokens"],
        point.get("host_capacity_tokens", 0),
        point.get("disk_capacity_tokens", 0),
    ]
    label = "+".join(human_tokens(c) for c in parts if c)
    # the same tokens asked at two K/V precisions are two rows
    return label + (f" {point['kv_dtype']}" if point.get("kv_dtype") else "")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _capacity(tokens: int) -> str:
    # 0: the tier is left out
    return human_tokens(tokens) if tokens else "-"


def significant(x: float | None) -> str:
    """Three significant digits, whole numbers from 100 up (0.0123, 3.40, 510, 1,647): a small figure never
    rounds to 0.0 beside a larger one computed from it."""
    if x is None:
        return "-"
    if x == 0:
        return "0"
    decimals = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def duration(seconds: float) -> str:
    """A span in the unit that shows it: 3.2 s, 4.5 min, 1.00 h."""
    if seconds < 60:
        return f"{significant(seconds)} s"
    if seconds < 3600:
        return f"{significant(seconds / 60)} min"
    return f"{significant(seconds / 3600)} h"


def tier_lines(report: dict) -> list[str]:
    tiered = [p for p in report["points"] if "tiers" in p]
    if not tiered:
        return []
    section = report.get("tiers") or {}
    span = section.get("trace_seconds") or 0.0
    lines = [
        "",
        "tiers     an exclusive LRU hierarchy: the device evicts to host, host to disk, disk drops; a hit in a "
        "lower tier is loaded back to the device",
        f"          saved: prefill seconds against the device-only run over the trace's {duration(span)}; "
        "per day: scaled to 24 h",
        f"{'device':>9} {'host':>9} {'disk':>9} {'method':>9} {'device':>7} {'host':>7} {'disk':>7} "
        f"{'total':>7} {'saved s':>11} {'GPU-h/day':>10} {'$/day':>10}",
    ]
    for p in tiered:
        tiers = p["tiers"]
        lines.append(
            f"{human_tokens(p['capacity_tokens']):>9} {_capacity(p['host_capacity_tokens']):>9} "
            f"{_capacity(p['disk_capacity_tokens']):>9} {p['method']:>9} {_pct(tiers['device']):>7} "
            f"{_pct(tiers['host']):>7} {_pct(tiers['disk']):>7} {_pct(p['token_hit_rate']):>7} "
            f"{significant(p.get('prefill_seconds_saved')):>11} {significant(p.get('gpu_hours_per_day')):>10} "
            f"{significant(p.get('cost_per_day')):>10}"
        )
    return lines
