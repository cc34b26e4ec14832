"""Summaries of a trace for `kvtui stats`: hit rates and TTFT / TPOT / ITL percentiles per workload phase."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from engine.latency import PERCENTILES, inter_token_latencies, percentiles, tpot
from engine.metrics import HitCounts


@dataclass
class PhaseStats:
    phase: str
    requests: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    hits: HitCounts = HitCounts()  # prefix lookups (first admissions and edits; not preemption readmissions)
    ttft: list[float] = field(default_factory=list)
    tpot: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)


def summarize(header: dict, events: list[dict]) -> list[PhaseStats]:
    """One PhaseStats per phase (in order of first arrival), then one for the whole trace ('all')."""
    block_size = header["block_size"]
    phase_of: dict[str, str] = {}
    token_times: dict[str, list[float]] = defaultdict(list)
    phases: dict[str, PhaseStats] = {}
    total = PhaseStats("all")

    def targets(request_id):
        phase = phase_of.get(request_id, "all")
        if phase == "all":
            return [total]
        return [phases.setdefault(phase, PhaseStats(phase)), total]

    for e in events:
        kind = e["type"]
        if kind == "request_arrived":
            phase_of[e["request_id"]] = e.get("phase") or "all"
            for s in targets(e["request_id"]):
                s.requests += 1
                s.prompt_tokens += len(e["prompt_token_ids"])
        elif kind == "prefix_match" and not e["detail"].get("readmission"):
            matchable = max(0, e["prompt_tokens"] - 1)  # the last prompt token is always computed
            lookup = HitCounts(matchable, e["matched_tokens"], matchable // block_size,
                               e["matched_tokens"] // block_size, 1, int(e["matched_tokens"] > 0))
            for s in targets(e["request_id"]):
                s.hits += lookup
        elif kind == "token_emitted":
            token_times[e["request_id"]].append(e["t"])
        elif kind == "request_finished":
            rid = e["request_id"]
            times = token_times.pop(rid, [])
            for s in targets(rid):
                s.generated_tokens += e["num_output_tokens"]
                if e["ttft"] is not None:
                    s.ttft.append(e["ttft"])
                value = tpot(times)
                if value is not None:
                    s.tpot.append(value)
                s.itl.extend(inter_token_latencies(times))
    return [*phases.values(), total]


def _ms(values: list[float]) -> str:
    found = percentiles(values)
    return "/".join("-" if v is None else f"{v * 1000:.0f}" for v in found.values())


def _pct(value: float, counts: HitCounts) -> str:
    return f"{value:.1%}" if counts.requests else "-"


def format_stats(stats: list[PhaseStats]) -> str:
    qs = "/".join(f"p{q}" for q in PERCENTILES)
    head = (f"{'phase':<10} {'reqs':>4} {'prompt':>7} {'gen':>6} {'tok hit':>8} {'req hit':>8} {'blk hit':>8}  "
            f"{'TTFT ms ' + qs:<22} {'TPOT ms ' + qs:<22} {'ITL ms ' + qs}")
    lines = [head, "-" * len(head)]
    for s in stats:
        lines.append(f"{s.phase:<10} {s.requests:>4} {s.prompt_tokens:>7} {s.generated_tokens:>6} "
                     f"{_pct(s.hits.token_hit_rate, s.hits):>8} {_pct(s.hits.request_hit_rate, s.hits):>8} "
                     f"{_pct(s.hits.block_hit_rate, s.hits):>8}  "
                     f"{_ms(s.ttft):<22} {_ms(s.tpot):<22} {_ms(s.itl)}")
    lines += ["", "token hit = hit tokens / prompt tokens that could match (all but the last); request hit = "
                  "requests with any hit / requests; block hit = block hits / block lookups."]
    return "\n".join(lines)
