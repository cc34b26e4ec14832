"""The tier table of `kvtui whatif --host-capacity ...`: each device x host x disk point's token hit rate per
tier, the prefill seconds it saves against the device-only run, and GPU-hours and money per day of trace."""

from __future__ import annotations

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


def _number(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


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
        f"          saved: prefill seconds against the device-only run over the trace's {span / 3600:,.2f} h; "
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
            f"{_number(p.get('prefill_seconds_saved')):>11} {_number(p.get('gpu_hours_per_day'), 2):>10} "
            f"{_number(p.get('cost_per_day'), 2):>10}"
        )
    return lines
