"""What `kvtui whatif` prints: the table, and the --json object whose keys checks read:

    {"workload", "format", "requests", "prompt_tokens",
     "ceiling": {"token_hit_rate"},
     "points": [{"capacity_tokens", "block_size", "eviction", "method": "one-pass" | "simulated",
                 "token_hit_rate", "misses": {cause: tokens}}],
     "optimal": [{"capacity_tokens", "token_hit_rate"}]}

plus "fleet" with --workers, "requests_detail" with --per-request, and "notes". A point also names
max_batched_tokens, max_num_seqs and prefix_cache when a sweep varies them.
"""

from __future__ import annotations

from kvtui.whatif.capacity import human_tokens
from kvtui.whatif.causes import shares_sentence


def as_json(workload, ceiling: float, points: list[dict], optimal: list[dict], notes: list[str],
            fleet: dict | None = None, detail: list[dict] | None = None) -> dict:
    out = {"workload": workload.name, "format": workload.format, "requests": len(workload.requests),
           "prompt_tokens": workload.prompt_tokens, "ceiling": {"token_hit_rate": ceiling},
           "points": points, "optimal": optimal, "notes": notes}
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
    lines = [f"workload  {report['workload']} ({report['format']}, {report['requests']:,} requests, "
             f"{human_tokens(report['prompt_tokens'])} prompt tokens)"]
    for problem in report.get("skipped_lines", [])[:10]:
        lines.append(f"  skipped {problem}")
    if len(report.get("skipped_lines", [])) > 10:
        lines.append(f"  ... {len(report['skipped_lines']) - 10} more lines skipped")
    lines += [f"note      {n}" for n in report["notes"]]
    lines.append(f"ceiling   {_pct(report['ceiling']['token_hit_rate']).strip()} of prompt tokens "
                 "(infinite cache, simulated)")
    optimal = {o["capacity_tokens"]: o["token_hit_rate"] for o in report["optimal"]}
    extra = [k for k in ("max_batched_tokens", "max_num_seqs", "prefix_cache") if any(k in p for p in
                                                                                      report["points"])]
    head = f"{'capacity':>9} {'block':>5} {'eviction':>8} {'method':>9} " + \
        "".join(f"{k[:12]:>13}" for k in extra) + f" {'hit rate':>8} {'optimal':>8}"
    lines += ["", head]
    for p in report["points"]:
        opt = optimal.get(p["capacity_tokens"])
        lines.append(f"{human_tokens(p['capacity_tokens']):>9} {p['block_size']:>5} {p['eviction']:>8} "
                     f"{p['method']:>9} " + "".join(f"{str(p.get(k, '')):>13}" for k in extra)
                     + f" {_pct(p['token_hit_rate']):>8} {_pct(opt) if opt is not None else '':>8}")
    lines.append("")
    for p in report["points"]:
        if p["method"] == "simulated":
            lines.append(f"{human_tokens(p['capacity_tokens'])} {p['eviction']} bs {p['block_size']}: "
                         + shares_sentence(report["prompt_tokens"], _counter(p["misses"])))
    fleet = report.get("fleet")
    if fleet:
        lines += ["", f"fleet     {fleet['workers']} workers x {human_tokens(fleet['capacity_tokens_per_worker'])}"
                  f", router {fleet['router']}: hit rate {_pct(fleet['token_hit_rate']).strip()}; longest-prefix "
                  f"router {_pct(fleet['longest_prefix_token_hit_rate']).strip()} (regret "
                  f"{100 * fleet['regret']:.1f} points); one shared cache of the same total "
                  f"{_pct(fleet['global_cache_token_hit_rate']).strip()}",
                  f"          {fleet['duplicated_blocks']:,} of {fleet['cached_blocks']:,} distinct cached blocks "
                  "are held by more than one worker at the end (extra copies)",
                  f"{'worker':>9} {'requests':>9} {'prompt tokens':>14} {'hit rate':>9} {'preemptions':>12}"]
        for w in fleet["per_worker"]:
            lines.append(f"{w['worker']:>9} {w['requests']:>9,} {w['prompt_tokens']:>14,} "
                         f"{_pct(w['token_hit_rate']):>9} {w['preemptions']:>12,}")
    for d in report.get("requests_detail", []):
        misses = ", ".join(f"{k} {v}" for k, v in sorted(d["misses"].items(), key=lambda kv: -kv[1]))
        lines.append(f"  {d['request_id']}: {d['hit_tokens']}/{d['prompt_tokens']} hit; missed {misses}"
                     + (f"; {d['detail']}" if d["detail"] else ""))
    return "\n".join(lines)


def _counter(misses: dict):
    from collections import Counter

    return Counter(misses)
