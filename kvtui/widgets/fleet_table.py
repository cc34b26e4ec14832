"""The fleet tab: one row per attached worker (resident blocks, occupancy where the pool size is known, stored
and removed per second; KV usage, token hit rate, TTFT p50/p95/p99 and preemptions from /metrics; gaps, lost
batches, restarts and malformed messages), and a line saying what an attached source has and lacks. It draws
a `FleetView` (plain data, kvtui/state/fleet_view.py), built here in a replay or by the collector live."""

from __future__ import annotations

from rich.segment import Segment
from textual.strip import Strip

from kvtui.state.fleet import HAS, LACKS
from kvtui.state.fleet_view import FleetView
from kvtui.widgets.base import LineView, fmt_seconds, pad
from kvtui.widgets.palette import Palette, theme_palette

BAR = 12
COLUMNS = (
    f"{'worker':<22} {'rank':>4} {'resident':>8} {'occupancy':<{BAR + 6}} {'stored/s':>8} "
    f"{'removed/s':>9} {'KV use':>6} {'hit':>6} {'TTFT p50/p95/p99':<20} {'preempt':>7}  stream"
)


def _pct(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def occupancy_bar(resident: int, capacity: int | None) -> str:
    if not capacity:
        # the column is BAR + 6 wide: say it whole
        return f"{'? pool unknown':<{BAR + 6}}"
    filled = min(BAR, round(BAR * resident / capacity))
    return f"{'█' * filled}{'░' * (BAR - filled)} {resident / capacity:>4.0%}"


def row_segments(c: dict, ordinal: int, palette: Palette | None = None) -> list[Segment]:
    ttft = "/".join(fmt_seconds(v) for v in c["ttft"]) if any(v is not None for v in c["ttft"]) else "-"
    stream = f"gaps {c['gaps']} lost {c['lost']} restarts {c['restarts']} malformed {c['malformed']}"
    if c.get("unseen"):
        stream += f" · history incomplete ({c['unseen']} batches lost)"
    if c.get("cache_dtype"):
        dtype = c["cache_dtype"]
        stream = f"KV {dtype}{' (model dtype)' if dtype == 'auto' else ''} · " + stream
    if c.get("down"):
        stream = f"DOWN? {c['down'][:40]} (blocks shown are stale) · " + stream
    trouble = c["lost"] or c["restarts"] or c["malformed"] or c.get("down")
    preempt = "-" if c["preemptions"] is None else f"{c['preemptions']:.0f}"
    palette = palette or theme_palette()
    return [
        Segment(f"{c['worker'][:22]:<22} ", palette.owner(ordinal)),
        Segment(f"{'-' if c['rank'] is None else c['rank']:>4} {c['resident']:>8} "),
        Segment(f"{occupancy_bar(c['resident'], c['capacity']):<{BAR + 6}} ", palette.owner(ordinal)),
        Segment(
            f"{c['stored_per_s']:>8.1f} {c['removed_per_s']:>9.1f} {_pct(c['kv_usage']):>6} "
            f"{_pct(c['hit_rate']):>6} {ttft:<20} {preempt:>7}  "
        ),
        Segment(stream, palette["warning"] if trouble else palette["dim"]),
    ]


def fleet_lines(view: FleetView | None, palette: Palette | None = None) -> list[list[Segment]]:
    palette = palette or theme_palette()
    dim, heading, warn = palette["dim"], palette["heading"], palette["warning"]
    if view is None:
        return [[Segment("waiting for the first event…", dim)]]
    total = sum(c["resident"] for c in view.workers)
    unique = view.unique
    lines = [
        [
            Segment(
                f"{len(view.workers)} workers · {total:,} resident blocks · {unique:,} distinct "
                f"(group, hash) blocks held · {total - unique:,} duplicate copies across workers",
                palette["bold"],
            )
        ],
        [Segment("an attached engine publishes: " + ", ".join(HAS), dim)],
        [Segment("it lacks: " + ", ".join(LACKS) + " (not shown, not invented)", dim)],
        [
            Segment(
                "occupancy = blocks the events say are held (cached ones included) / pool size; KV use = the "
                "server's kv_cache_usage_perc: blocks held by running requests only",
                dim,
            )
        ],
        [Segment(COLUMNS, heading)],
    ]
    for i, cells in enumerate(view.workers):
        lines.append(row_segments(cells, i, palette))
    if view.notes:
        lines.append([Segment("")])
        lines.append([Segment("stream notes (newest last):", heading)])
        lines += [[Segment(note, warn)] for note in view.notes]
    return lines


class FleetTableView(LineView):
    """One line per worker; `update_fleet` rebuilds the few lines (a fleet has tens of workers, not thousands)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.fleet: FleetView | None = None
        self._key: tuple | None = None
        self._lines: list[list[Segment]] = []

    @property
    def lines(self) -> list[list[Segment]]:
        """The lines of the latest view in the current theme's looks (rebuilt when either changes)."""
        palette = self.palette()
        key = (id(self.fleet), palette)
        if key != self._key:
            self._lines, self._key = fleet_lines(self.fleet, palette), key
        return self._lines

    def update_fleet(self, view: FleetView | None) -> None:
        self.fleet = view
        self._key = None
        self.refresh_rows()

    def row_count(self, width: int) -> int:
        return len(self.lines)

    def render_row(self, row: int, width: int) -> Strip:
        return pad(self.lines[row], width)
