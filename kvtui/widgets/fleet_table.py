"""The fleet tab: one row per attached worker (resident blocks, occupancy where the pool size is known, stored
and removed per second; KV usage, token hit rate, TTFT p50/p95/p99 and preemptions from /metrics; gaps, lost
batches, restarts and malformed messages), and a line saying what an attached source has and lacks."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from kvtui.sources.prometheus import histogram_quantile, token_hit_rate
from kvtui.state.fleet import HAS, LACKS, FleetState, SourceCounts, Worker
from kvtui.widgets.base import BOLD, DIM, HEADING, LineView, fmt_seconds, owner_style, pad

BAR = 12
WARN = Style(color="#d9596b", bold=True)
COLUMNS = (f"{'worker':<22} {'rank':>4} {'resident':>8} {'occupancy':<{BAR + 6}} {'stored/s':>8} "
           f"{'removed/s':>9} {'KV use':>6} {'hit':>6} {'TTFT p50/p95/p99':<20} {'preempt':>7}  stream")


def _pct(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def worker_cells(fleet: FleetState, worker: Worker) -> dict:
    """The facts of one row, as plain values (tests read these; the view formats them)."""
    facts, before = fleet.facts(worker)
    stored, removed = worker.rates(fleet.now if fleet.now is not None else fleet.t)
    buckets = facts.get("ttft_buckets") or []
    counts = fleet.sources.get(worker.source) or SourceCounts()
    return {"worker": worker.worker, "rank": worker.rank, "resident": worker.resident,
            "capacity": fleet.capacity(worker), "stored_per_s": stored, "removed_per_s": removed,
            "kv_usage": facts.get("kv_usage"), "hit_rate": token_hit_rate(facts, before),
            "ttft": [histogram_quantile(q, buckets) for q in (0.5, 0.95, 0.99)],
            "preemptions": facts.get("preemptions"),
            "gaps": counts.gaps, "lost": counts.lost, "restarts": counts.restarts, "malformed": counts.malformed}


def occupancy_bar(resident: int, capacity: int | None) -> str:
    if not capacity:
        return f"{'?':<{BAR}} (pool size unknown)"[:BAR + 6]
    filled = min(BAR, round(BAR * resident / capacity))
    return f"{'█' * filled}{'░' * (BAR - filled)} {resident / capacity:>4.0%}"


def row_segments(fleet: FleetState, worker: Worker, ordinal: int) -> list[Segment]:
    c = worker_cells(fleet, worker)
    ttft = "/".join(fmt_seconds(v) for v in c["ttft"]) if any(v is not None for v in c["ttft"]) else "-"
    stream = f"gaps {c['gaps']} lost {c['lost']} restarts {c['restarts']} malformed {c['malformed']}"
    trouble = c["lost"] or c["restarts"] or c["malformed"]
    preempt = "-" if c["preemptions"] is None else f"{c['preemptions']:.0f}"
    return [Segment(f"{c['worker'][:22]:<22} ", owner_style(ordinal)),
            Segment(f"{'-' if c['rank'] is None else c['rank']:>4} {c['resident']:>8} "),
            Segment(f"{occupancy_bar(c['resident'], c['capacity']):<{BAR + 6}} ", owner_style(ordinal)),
            Segment(f"{c['stored_per_s']:>8.1f} {c['removed_per_s']:>9.1f} {_pct(c['kv_usage']):>6} "
                    f"{_pct(c['hit_rate']):>6} {ttft:<20} {preempt:>7}  "),
            Segment(stream, WARN if trouble else DIM)]


def fleet_lines(fleet: FleetState | None) -> list[list[Segment]]:
    if fleet is None:
        return [[Segment("waiting for the first event…", DIM)]]
    total = sum(w.resident for w in fleet.workers.values())
    unique = fleet.held_nodes
    lines = [[Segment(f"{len(fleet.workers)} workers · {total:,} resident blocks · {unique:,} distinct "
                      f"(group, hash) blocks held · {total - unique:,} duplicate copies across workers", BOLD)],
             [Segment("an attached engine publishes: " + ", ".join(HAS), DIM)],
             [Segment("it lacks: " + ", ".join(LACKS) + " (not shown, not invented)", DIM)],
             [Segment(COLUMNS, HEADING)]]
    for i, worker in enumerate(fleet.workers.values()):
        lines.append(row_segments(fleet, worker, i))
    if fleet.notes:
        lines.append([Segment("")])
        lines.append([Segment("stream notes (newest last):", HEADING)])
        lines += [[Segment(note, WARN)] for note in fleet.notes[-12:]]
    return lines


class FleetTableView(LineView):
    """One line per worker; `update_fleet` rebuilds the few lines (a fleet has tens of workers, not thousands)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.lines: list[list[Segment]] = fleet_lines(None)

    def update_fleet(self, fleet: FleetState | None) -> None:
        self.lines = fleet_lines(fleet)
        self.refresh_rows()

    def row_count(self, width: int) -> int:
        return len(self.lines)

    def render_row(self, row: int, width: int) -> Strip:
        return pad(self.lines[row], width)
