"""Summaries of a trace for `kvtui stats`: hit rates and TTFT / TPOT / ITL percentiles per workload phase, as
a table (`format_stats`) or one JSON object (`stats_json`), and with a host tier the hit tokens each tier served
and the bytes loaded back (`tier_totals`). Every figure is computed by engine/trace/metrics.py, the same
definitions the UI uses."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.trace.metrics import PERCENTILES, HitCounts, LatencyTracker, is_lookup, percentiles, summary


@dataclass
class PhaseStats:
    phase: str
    requests: int = 0
    # every prefix lookup's prompt: the first admission's and each edit's (the misses' prompt tokens)
    prompt_tokens: int = 0
    # tokens the engine generated (every token_emitted, edits' reruns included)
    generated_tokens: int = 0
    # prefix lookups (first admissions and edits; not preemption readmissions)
    hits: HitCounts = HitCounts()
    latency: LatencyTracker = field(default_factory=LatencyTracker)

    @property
    def ttft(self) -> list[float]:
        return self.latency.ttfts()

    @property
    def tpot(self) -> list[float]:
        return self.latency.tpots()

    @property
    def itl(self) -> list[float]:
        return self.latency.itl


NO_PHASE = "no phase"


def summarize(header: dict, events: list[dict]) -> list[PhaseStats]:
    """One PhaseStats per phase (in order of first arrival), then one for the whole trace ('all'). In a trace
    where some requests name a phase, the others are the phase "no phase", so the phases add up to 'all'."""
    block_size = header["block_size"]
    phase_of: dict[str, str] = {}
    phases: dict[str, PhaseStats] = {}
    total = PhaseStats("all")

    def targets(request_id):
        phase = phase_of.get(request_id)
        if phase is None:
            return [total]
        return [phases.setdefault(phase, PhaseStats(phase)), total]

    for e in events:
        kind = e["type"]
        if kind == "request_arrived":
            rid = e["request_id"]
            phase_of[rid] = e.get("phase") or NO_PHASE
            for s in targets(rid):
                s.requests += 1
                s.latency.arrived(rid, e["t"])
        elif kind == "prefix_match" and is_lookup(e):
            lookup = HitCounts.lookup(e["prompt_tokens"], e["matched_tokens"], block_size)
            for s in targets(e["request_id"]):
                s.prompt_tokens += e["prompt_tokens"]
                s.hits += lookup
        elif kind == "token_emitted":
            for s in targets(e["request_id"]):
                s.generated_tokens += 1
                s.latency.token(e["request_id"], e["t"])
        elif kind == "edit":
            for s in targets(e["request_id"]):
                s.latency.edited(e["request_id"])
        elif kind == "request_finished":
            for s in targets(e["request_id"]):
                s.latency.finished(e["request_id"], e["ttft"], e["tpot"])
    # no request names a phase: the whole trace is one row
    if list(phases) == [NO_PHASE]:
        phases.clear()
    return [*phases.values(), total]


def phase_json(s: PhaseStats) -> dict:
    """One phase as JSON: the table's row with full precision (seconds, rates in 0..1) and the raw counts."""
    return {
        "phase": s.phase,
        "requests": s.requests,
        "prompt_tokens": s.prompt_tokens,
        "generated_tokens": s.generated_tokens,
        **s.hits.rates(),
        "hit_counts": s.hits.as_dict(),
        "ttft_s": summary(s.ttft),
        "tpot_s": summary(s.tpot),
        "itl_s": summary(s.itl),
    }


def tier_totals(events: list[dict]) -> dict | None:
    """{"device": {"hit_tokens"}, "host": {"hit_tokens", "loaded_bytes"}, ...}: hit tokens as the engine counted
    them (its last hit_rates event), bytes as its block_loaded events say; None for a trace without tiers."""
    hits: dict | None = None
    loaded: dict[str, int] = {}
    for e in events:
        kind = e["type"]
        if kind == "hit_rates" and e.get("tiers"):
            hits = e["tiers"]
        elif kind == "block_loaded":
            loaded[e["tier"]] = loaded.get(e["tier"], 0) + e["bytes"]
    if hits is None and not loaded:
        return None
    names = dict.fromkeys([*(hits or {"device": None}), *loaded])
    return {
        name: {
            "hit_tokens": (hits or {}).get(name, {}).get("hit_tokens", 0),
            **({} if name == "device" else {"loaded_bytes": loaded.get(name, 0)}),
        }
        for name in names
    }


def format_tiers(tiers: dict) -> str:
    """The tiers as one line under the table."""
    parts = [
        f"{name} {counts['hit_tokens']:,} hit tokens"
        + (f" ({counts['loaded_bytes'] / 2**20:,.1f} MiB loaded back)" if "loaded_bytes" in counts else "")
        for name, counts in tiers.items()
    ]
    return "tiers: " + ", ".join(parts)


def stats_json(
    trace_file: str, header: dict, events: list[dict], stats: list[PhaseStats], error: str | None = None
) -> dict:
    """`kvtui stats --json`: one object. Extend it by adding keys (an attach trace adds "workers"; a trace with a
    host tier "tiers")."""
    out = {
        "trace": trace_file,
        "events": len(events),
        "block_size": header.get("block_size"),
        "num_blocks": header.get("num_blocks"),
        "model": (header.get("model") or {}).get("name"),
        "error": error,
        "phases": [phase_json(s) for s in stats[:-1]],
        "all": phase_json(stats[-1]),
    }
    tiers = tier_totals(events)
    if tiers is not None:
        out["tiers"] = tiers
    return out


def _ms(values: list[float]) -> str:
    found = percentiles(values)
    return "/".join("-" if v is None else f"{v * 1000:.0f}" for v in found.values())


def _pct(value: float, counts: HitCounts) -> str:
    return f"{value:.1%}" if counts.requests else "-"


def format_stats(stats: list[PhaseStats]) -> str:
    qs = "/".join(f"p{q}" for q in PERCENTILES)
    head = (
        f"{'phase':<10} {'reqs':>4} {'lookups':>7} {'prompt':>7} {'gen':>6} {'tok hit':>8} {'lkp hit':>8} "
        f"{'blk hit':>8}  {'TTFT ms ' + qs:<22} {'TPOT ms ' + qs:<22} {'ITL ms ' + qs}"
    )
    lines = [head, "-" * len(head)]
    for s in stats:
        lines.append(
            f"{s.phase:<10} {s.requests:>4} {s.hits.requests:>7} {s.prompt_tokens:>7} {s.generated_tokens:>6} "
            f"{_pct(s.hits.token_hit_rate, s.hits):>8} {_pct(s.hits.request_hit_rate, s.hits):>8} "
            f"{_pct(s.hits.block_hit_rate, s.hits):>8}  "
            f"{_ms(s.ttft):<22} {_ms(s.tpot):<22} {_ms(s.itl)}"
        )
    lines += [
        "",
        "lookups: prefix lookups (each request's admission and each edit's; a preempted request's "
        "readmission is not one); prompt: their prompt tokens. tok hit = hit tokens / prompt tokens that "
        "could match (all but each lookup's last, which is always computed); lkp hit = lookups with any "
        "hit / lookups; blk hit = whole blocks found / whole blocks that could match (a partly reused "
        "block counts in tok hit only). TTFT and TPOT: each request's latest run; ITL: every gap between "
        "two tokens of a request (percentiles interpolated).",
    ]
    return "\n".join(lines)
