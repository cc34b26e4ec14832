"""What `kvtui whatif` prints: the table, and the --json object whose keys checks read:

    {"workload", "format", "requests", "prompt_tokens",
     "ceiling": {"token_hit_rate"},
     "points": [{"capacity_tokens", "block_size", "eviction", "method": "one-pass" | "simulated",
                 "token_hit_rate", "misses": {cause: tokens}}],
     "optimal": [{"capacity_tokens", "token_hit_rate"}]}

plus "fleet" (the first router) and "fleets" (every router) with --workers, "tiers" with --host-capacity
(tiers.py's `tier_section`: the cost model's assumptions, the trace's span, the curve per tier, the surface;
each point then has "host_capacity_tokens", "disk_capacity_tokens", "tiers": {"device", "host", "disk"} token
hit rates, "prefill_seconds_saved", "gpu_hours_per_day", "cost_per_day"), "targets" with --target,
"fidelity" when the log carries the server's cached tokens, "requests_detail" with --per-request, and
"notes". A point also names max_batched_tokens, max_num_seqs and prefix_cache when a sweep varies them.
`ceiling.source` says where the ceiling came from: "one-pass" (the curve's limit) or "simulated".
"""

from __future__ import annotations

from kvtui.whatif.beyond import ONE_PASS_LABEL, OPTIMAL_LABEL, beyond_line
from kvtui.whatif.capacity import human_bytes, human_tokens
from kvtui.whatif.causes import shares_sentence
from kvtui.whatif.fidelity import fidelity_lines
from kvtui.whatif.precisions import rounded_line
from kvtui.whatif.tier_report import capacity_label, point_key, tier_lines


def as_json(
    workload,
    ceiling: float,
    points: list[dict],
    optimal: list[dict],
    notes: list[str],
    fleet: dict | None = None,
    detail: list[dict] | None = None,
) -> dict:
    out = {
        "workload": workload.name,
        "format": workload.format,
        "requests": workload.num_requests,
        "prompt_tokens": workload.prompt_tokens,
        "ceiling": {"token_hit_rate": ceiling},
        "points": points,
        "optimal": optimal,
        "notes": notes,
    }
    if workload.problems:
        out["skipped_lines"] = workload.problems
    if fleet is not None:
        out["fleet"] = fleet
    if detail is not None:
        out["requests_detail"] = detail
    return out


def _pct(x: float) -> str:
    return f"{100 * x:5.1f}%"


def as_table(report: dict) -> str:
    lines = [
        f"workload  {report['workload']} ({report['format']}, {report['requests']:,} requests, "
        f"{human_tokens(report['prompt_tokens'])} prompt tokens)"
    ]
    for problem in report.get("skipped_lines", [])[:10]:
        lines.append(f"  skipped {problem}")
    if len(report.get("skipped_lines", [])) > 10:
        lines.append(f"  ... {len(report['skipped_lines']) - 10} more lines skipped")
    lines += [f"note      {n}" for n in report["notes"]]
    source = report["ceiling"].get("source", "simulated")
    lines.append(
        f"ceiling   {_pct(report['ceiling']['token_hit_rate']).strip()} of prompt tokens "
        + (
            "(every whole block seen before hits: the one-pass curve's limit)"
            if source == "one-pass"
            else "(infinite cache, simulated)"
        )
    )
    lines += [
        f"note      capacity {rounded_line(r)}: rounded down to whole blocks"
        for r in report.get("capacities_rounded", [])
    ]
    for t in report.get("targets", []):
        share = (
            f"{100 * t['fraction_of_ceiling']:g}% of the one-pass ceiling "
            f"({_pct(t['ceiling_token_hit_rate']).strip()})"
        )
        if t["capacity_tokens"] is None:
            lines.append(f"target    {share}: not reached")
            continue
        size = human_tokens(t["capacity_tokens"]) + " tokens"
        if t.get("capacity_bytes") is not None:
            size += f" ({human_bytes(t['capacity_bytes'])} at {t['kv_dtype']})"
        lines.append(
            f"target    {share}: {size}, {_pct(t['token_hit_rate']).strip()} of prompt tokens "
            "(the smallest LRU capacity that reaches it)"
        )
    optimal = {o["capacity_tokens"]: o["token_hit_rate"] for o in report["optimal"]}
    extra = [
        k
        for k in ("max_batched_tokens", "max_num_seqs", "prefix_cache")
        if any(k in p for p in report["points"])
    ]
    in_bytes = any("capacity_bytes" in p for p in report["points"])
    head = (
        f"{'capacity':>9} "
        + (f"{'bytes':>10} {'K/V':>9} " if in_bytes else "")
        + f"{'block':>5} {'eviction':>8} {'method':>9} "
        + "".join(f"{k[:12]:>13}" for k in extra)
        + f" {'hit rate':>8}  {OPTIMAL_LABEL}"
    )
    plain = [p for p in report["points"] if "tiers" not in p]
    lines += ["", head] if plain else []
    for p in plain:
        opt = optimal.get(p["capacity_tokens"])
        lines.append(
            f"{human_tokens(p['capacity_tokens']):>9} "
            + (f"{human_bytes(p['capacity_bytes']):>10} {p['kv_dtype']:>9} " if in_bytes else "")
            + f"{p['block_size']:>5} {p['eviction']:>8} {p['method']:>9} "
            + "".join(f"{str(p.get(k, '')):>13}" for k in extra)
            + f" {_pct(p['token_hit_rate']):>8}  {_pct(opt) if opt is not None else '':>{len(OPTIMAL_LABEL)}}"
        )
    methods = {p["method"] for p in plain}
    if "one-pass" in methods:
        simulated = "; simulated: the engine's scheduler and cache" if "simulated" in methods else ""
        lines.append(f"          one-pass: {ONE_PASS_LABEL}{simulated}")
    lines += tier_lines(report)
    for p in report["points"]:
        above = beyond_line(p, report["prompt_tokens"]) if p["eviction"] != "none" else None
        if above is not None:
            lines.append(f"above     {capacity_label(p)} {p['eviction']} bs {p['block_size']}: {above}")
    lines.append("")
    for p in report["points"]:
        if p["method"] == "simulated":
            lines.append(
                f"{capacity_label(p)} {p['eviction']} bs {p['block_size']}: "
                + shares_sentence(report["prompt_tokens"], _counter(p["misses"]))
            )
    lines += compare_lines(report)
    lines += fleet_lines(report)
    lines += fidelity_lines(report)
    if report.get("latency"):
        from kvtui.whatif.latency_fit import latency_lines

        lines += latency_lines(report)
    for d in report.get("requests_detail", []):
        misses = ", ".join(f"{k} {v}" for k, v in sorted(d["misses"].items(), key=lambda kv: -kv[1]))
        lines.append(
            f"  {d['request_id']}: {d['hit_tokens']}/{d['prompt_tokens']} hit; missed {misses}"
            + (f"; {d['detail']}" if d["detail"] else "")
        )
    return "\n".join(lines)


def fleet_lines(report: dict) -> list[str]:
    fleets = report.get("fleets") or ([report["fleet"]] if report.get("fleet") else [])
    if not fleets:
        return []
    first = fleets[0]
    lines = [
        "",
        f"fleet     {first['workers']} workers x {human_tokens(first['capacity_tokens_per_worker'])}; "
        f"one shared cache of the same total {_pct(first['global_cache_token_hit_rate']).strip()}",
        "          reachable: the longest prefix cached on any worker at arrival; achieved: on the chosen "
        "worker; regret = reachable - achieved (Dynamo's)",
        # the hit rate also counts partly filled blocks and blocks computed between routing and admission
        "          reachable and achieved: whole prompt blocks at routing time (the hit rate may be above them)",
        f"{'router':>15} {'hit rate':>9} {'reachable':>10} {'achieved':>9} {'regret':>7} {'copies':>7}",
    ]
    for f in fleets:
        lines.append(
            f"{f['router']:>15} {_pct(f['token_hit_rate']):>9} {_pct(f['reachable_hit_rate']):>10} "
            f"{_pct(f['achieved_hit_rate']):>9} {100 * f['regret']:>6.1f}p {f['duplicated_blocks']:>7,}"
        )
    lines.append(
        f"          copies: blocks held by more than one worker at the end; per worker ({first['router']}):"
    )
    lines.append(f"{'worker':>9} {'requests':>9} {'prompt tokens':>14} {'hit rate':>9} {'preemptions':>12}")
    for w in first["per_worker"]:
        lines.append(
            f"{w['worker']:>9} {w['requests']:>9,} {w['prompt_tokens']:>14,} "
            f"{_pct(w['token_hit_rate']):>9} {w['preemptions']:>12,}"
        )
    return lines


def _counter(misses: dict):
    from collections import Counter

    return Counter(misses)


SUMMARY_KEYS = (
    "workload",
    "format",
    "requests",
    "prompt_tokens",
    "points",
    "optimal",
    "curve",
    "fleet",
    "tiers",
    "capacities_rounded",
    "latency",
)


def summary_event(report: dict, current: dict, misses: dict) -> dict:
    """The `whatif_summary` event (engine/trace/schema.py) that `-o` appends to its trace, so that replay's
    what-if tab shows the curve, the causes and the fleet of the run the trace came from."""
    out = {k: report.get(k) for k in SUMMARY_KEYS}
    out.update(ceiling=report["ceiling"]["token_hit_rate"], current=current, misses=misses)
    out["curve"] = out["curve"] or []
    for key in ("tiers", "capacities_rounded", "latency"):
        if out[key] is None:
            # only a tiered run has tiers, only a run given capacities that were not whole blocks the other,
            # only a run asked for latency (--latency, --calibrate) the last
            del out[key]
    return out


def append_summary(path: str, event: dict) -> None:
    """Append the summary as the trace's last event (seq and t follow the last line's)."""
    import json

    with open(path, "rb") as f:
        f.seek(0, 2)
        f.seek(max(0, f.tell() - (4 << 20)))
        last = json.loads(f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1])
    seq, t = (last["seq"] + 1, last["t"]) if last.get("type") != "header" else (0, 0.0)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"seq": seq, "t": t, "type": "whatif_summary", **event}) + "\n")


def _small(x: float) -> str:
    """A share that may be tiny: two decimals (0.02%)."""
    return f"{100 * x:.2f}%"


def compare_lines(report: dict) -> list[str]:
    """One-pass beside simulated at each capacity both ran, and what in the simulation broke the one-pass
    model's assumptions (the figures of the simulated run that the one-pass model has no room for)."""
    one = {point_key(p): p for p in report["points"] if p["method"] == "one-pass"}
    pairs = [
        (p, one[point_key(p)])
        for p in report["points"]
        if p["method"] == "simulated" and p["eviction"] == "lru" and point_key(p) in one
    ]
    if not pairs:
        return []
    prompt = report["prompt_tokens"] or 1
    # device+host+disk labels are wider
    w = max(9, *(len(capacity_label(sim)) for sim, _ in pairs))
    lines = [
        "",
        "one-pass vs simulated (LRU): equal where the one-pass model's assumptions hold; the simulated "
        "run's departures from them:",
        f"{'capacity':>{w}} {'block':>5} {'one-pass':>9} {'simulated':>9} {'diff':>6} {'preempt':>8} "
        f"{'recomputed':>10} {'in flight':>9} {'partial':>8} {'generated':>9}",
    ]
    for sim, op in pairs:
        misses = sim["misses"]
        lines.append(
            f"{capacity_label(sim):>{w}} {sim['block_size']:>5} {_pct(op['token_hit_rate']):>9} "
            f"{_pct(sim['token_hit_rate']):>9} {100 * (sim['token_hit_rate'] - op['token_hit_rate']):>+6.1f} "
            f"{sim.get('preemptions', 0):>8,} {_small(misses.get('preemption', 0) / prompt):>10} "
            f"{_small(misses.get('in_flight', 0) / prompt):>9} "
            f"{_small(sim.get('reused_partial_tokens', 0) / prompt):>8} "
            f"{_small(sim.get('generated_hit_tokens', 0) / prompt):>9}"
        )
    lines += [
        "  recomputed: served at admission, computed again after a preemption (one-pass: no preemption)",
        "  in flight: a block another running request had announced but not computed yet (one-pass: one request "
        "at a time)",
        "  partial: served from a partly filled cached block (one-pass: whole blocks only)",
        "  generated: served from a whole block that no earlier prompt held, its tokens generated (one-pass: "
        "prompt blocks only)",
        "  the rest: running requests hold pool blocks (their prompt, pinned by locks, and their generated "
        "tokens), so less room is left to cache, and chunking and batching change the order of use, so LRU "
        "evicts other blocks",
    ]
    return lines
