"""An attach trace in figures: one summary per worker (and per tier it held blocks on), the fleet's totals for `kvtui stats` (hit rate from
/metrics, block and pool size; an attached engine publishes no requests, so `requests` is null), and
`kvtui replay --check`'s line."""

from __future__ import annotations

from kvtui.state.fleet import FleetState
from kvtui.state.fleet_sources import SourceCounts
from kvtui.state.fleet_tiers import GPU
from kvtui.state.fleet_workers import Worker
from kvtui.state.server_figures import offload_facts


def workers_summary(state: FleetState) -> list[dict]:
    """One object per worker, for `kvtui stats --json` of an attach trace."""
    out = []
    for worker in state.workers.values():
        counts = state.sources.get(worker.source, SourceCounts())
        out.append(
            {
                "source": worker.source,
                "name": worker.name,
                "worker": worker.worker,
                "rank": worker.rank,
                "resident_blocks": worker.resident,
                "extra_copies": worker.copies,
                "rereported_blocks": worker.rereported,
                "blocks_stored": worker.stored,
                "blocks_removed": worker.removed,
                # GPU first, then each tier below it (kvtui/state/fleet_tiers.py)
                "tiers": tier_rows(worker),
                "gaps": counts.gaps,
                "lost_batches": counts.lost,
                "restarts": counts.restarts,
                "malformed": counts.malformed,
            }
        )
    return out


def tier_rows(worker: Worker) -> dict:
    """tier -> blocks held at the end, stored and removed (block hashes in its events), fastest first."""
    held, stored, removed = worker.held_tiers(), worker.stored_tiers(), worker.removed_tiers()
    return {
        tier: {"resident_blocks": held[tier], "blocks_stored": stored[tier], "blocks_removed": removed[tier]}
        for tier in held
    }


def offload_totals(state: FleetState) -> dict | None:
    """What /metrics said of the tiers below the GPU over the trace (the last reading against the first of the
    same process, summed over servers), None when no server exported offloading counters."""
    out: dict = {}

    def add(name: str, value: float) -> None:
        out[name] = out.get(name, 0) + value

    for key, last in state.metrics.items():
        first = state.metrics_first.get(key, last)
        # one reading: the server's totals since it started
        before = {} if first is last else first
        facts = offload_facts(last, before)
        for name in ("loaded", "stored"):
            if facts.get(name) is not None:
                add(f"{name}_{facts['unit']}", facts[name])
        if "capacity_blocks" in facts:
            add("capacity_blocks", facts["capacity_blocks"])
        for source, n in (facts.get("cached_tokens") or {}).items():
            cached = out.setdefault("cached_tokens", {})
            cached[source] = cached.get(source, 0) + n
        if "external_queries" in last:
            add("connector_hit_tokens", last.get("external_hits", 0.0) - before.get("external_hits", 0.0))
            add("connector_query_tokens", last["external_queries"] - before.get("external_queries", 0.0))
    if out.get("connector_query_tokens"):
        out["connector_hit_rate"] = out["connector_hit_tokens"] / out["connector_query_tokens"]
    return out or None


def attach_totals(state: FleetState) -> dict:
    """`kvtui stats --json` of an attach trace: what the fleet's own figures say, where a trace of our engine
    counts requests (an attached engine publishes none: `requests` is null, not 0). Token hit rate from
    /metrics over the trace (the last reading against the first of the same process); block size from the
    stored blocks (else /metrics); pool size from /metrics or blocks=."""
    hits = queries = 0.0
    for key, last in state.metrics.items():
        first = state.metrics_first.get(key, last)
        if first is last:
            # one reading: the server's totals since it started
            first = {}
        hits += last.get("prefix_hits", 0.0) - first.get("prefix_hits", 0.0)
        queries += last.get("prefix_queries", 0.0) - first.get("prefix_queries", 0.0)
    sizes = {w.block_size for w in state.workers.values() if w.block_size}
    sizes |= {f["block_size"] for f in state.metrics.values() if f.get("block_size")} if not sizes else set()
    pools = {state.capacity(w) for w in state.workers.values()} - {None}
    return {
        "block_size": sizes.pop() if len(sizes) == 1 else (sorted(sizes) or None),
        "num_blocks": pools.pop() if len(pools) == 1 else (sorted(pools) or None),
        "requests": None,
        "token_hit_rate": hits / queries if queries > 0 else None,
        "prefix_hit_tokens": hits if queries > 0 else None,
        "prefix_query_tokens": queries if queries > 0 else None,
        "offload": offload_totals(state),
        "note": "an attached engine publishes blocks, not requests: hit rate from its /metrics over the trace",
    }


def check_line(state: FleetState) -> str:
    """`kvtui replay --check` of an attach trace: what it holds, in the fleet's terms."""
    totals = attach_totals(state)
    return (
        f"{len(state.workers)} workers, {totals['num_blocks'] or '?'} blocks of {totals['block_size'] or '?'} "
        f"tokens, {sum(w.resident for w in state.workers.values())} resident at the end"
    )


def format_workers(workers: list[dict]) -> str:
    """`kvtui stats` of an attach trace: the workers table."""
    head = (
        f"{'worker':<24} {'source':<26} {'rank':>4} {'resident':>8} {'stored':>8} {'removed':>8} {'gaps':>5} "
        f"{'lost':>5} {'restarts':>8} {'malformed':>9}"
    )
    lines = [head, "-" * len(head)]
    for w in workers:
        lines.append(
            f"{w['worker']:<24} {w['source']:<26} {w['rank'] if w['rank'] is not None else '-':>4} "
            f"{w['resident_blocks']:>8} {w['blocks_stored']:>8} {w['blocks_removed']:>8} {w['gaps']:>5} "
            f"{w['lost_batches']:>5} {w['restarts']:>8} {w['malformed']:>9}"
        )
    lines += [
        "",
        "resident = blocks on the GPU at the end of the trace; stored / removed = block hashes in "
        "BlockStored / BlockRemoved events; gaps, lost batches, restarts and malformed messages are "
        "counted per source (its publisher's stream).",
    ]
    if any(set(w["tiers"]) - {GPU} for w in workers):
        lines += ["", *format_tiers(workers)]
    return "\n".join(lines)


def format_tiers(workers: list[dict]) -> list[str]:
    """The per-tier table, for a trace whose workers held blocks below the GPU."""
    head = f"{'worker':<24} {'tier':<16} {'resident':>8} {'stored':>8} {'removed':>8}"
    lines = [head, "-" * len(head)]
    for w in workers:
        for tier, c in w["tiers"].items():
            lines.append(
                f"{w['worker']:<24} {tier:<16} {c['resident_blocks']:>8} {c['blocks_stored']:>8} "
                f"{c['blocks_removed']:>8}"
            )
    lines += [
        "",
        "per tier (the medium of the events: GPU, CPU, CPU_PINNED, STORAGE, ...): blocks held there at the end, "
        "and block hashes stored to / removed from it. One block may be held on several tiers at once.",
    ]
    return lines
