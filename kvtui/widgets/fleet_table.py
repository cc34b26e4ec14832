"""The fleet tab: one row per attached worker (resident blocks, occupancy where the pool size is known, the
blocks held on each tier below the GPU when any worker offloads, stored and removed per second; KV usage, token hit rate, TTFT p50/p95/p99 and preemptions from /metrics; gaps, lost
batches, restarts and malformed messages; what /metrics says of the offloading tiers), and a line saying what an attached source has and lacks. It draws
a `FleetView` (plain data, kvtui/state/fleet_view.py), built here in a replay or by the collector live."""

from __future__ import annotations

from rich.segment import Segment
from textual.strip import Strip

from kvtui.state.fleet import HAS, LACKS
from kvtui.state.fleet_tiers import GPU, tiers_text
from kvtui.state.fleet_view import FleetView
from kvtui.widgets.base import LineView, fmt_seconds, pad
from kvtui.widgets.palette import Palette, theme_palette

BAR = 12
# the tiers-below-the-GPU column, shown when a worker holds blocks there
BELOW = 22
COLUMNS = (
    f"{'worker':<22} {'rank':>4} {'resident':>8} {'occupancy':<{BAR + 6}} {'stored/s':>8} "
    f"{'removed/s':>9} {'KV use':>6} {'hit':>6} {'TTFT p50/p95/p99':<20} {'preempt':>7}  stream"
)
COLUMNS_BELOW = COLUMNS.replace(
    "occupancy".ljust(BAR + 6), "occupancy".ljust(BAR + 6) + " " + "below GPU".ljust(BELOW)
)


def _pct(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def occupancy_bar(resident: int, capacity: int | None) -> str:
    if not capacity:
        # the column is BAR + 6 wide: say it whole
        return f"{'? pool unknown':<{BAR + 6}}"
    filled = min(BAR, round(BAR * resident / capacity))
    return f"{'█' * filled}{'░' * (BAR - filled)} {resident / capacity:>4.0%}"


def _amount(value: float, unit: str) -> str:
    if unit == "bytes":
        for size, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if value >= size:
                return f"{value / size:.1f} {name}"
        return f"{value:.0f} B"
    return f"{value:,.0f} {unit}"


def offload_text(offload: dict) -> str:
    """What /metrics says of the tiers below the GPU, in a few words ('' when it says nothing)."""
    parts = []
    if "external_hit_rate" in offload:
        parts.append(f"connector hit {offload['external_hit_rate']:.0%}")
    if "unit" in offload:
        moved = [
            f"{word} {_amount(offload[key], offload['unit'])}"
            for word, key in (("loaded", "loaded"), ("stored", "stored"))
            if offload.get(key) is not None
        ]
        parts.append(" ".join(moved))
    if "host_usage" in offload:
        parts.append(f"host {offload['host_usage']:.0%} used")
    if "capacity_blocks" in offload:
        parts.append(f"tier of {offload['capacity_blocks']:,} blocks")
    cached = {k: v for k, v in (offload.get("cached_tokens") or {}).items() if k != "total"}
    if cached:
        parts.append("hit tokens " + " ".join(f"{k} {v:,.0f}" for k, v in cached.items()))
    return "offload: " + ", ".join(parts) if parts else ""


def below_text(tiers: dict) -> str:
    """Blocks held on the tiers below the GPU (the column is BELOW wide)."""
    text = tiers_text({tier: n for tier, n in tiers.items() if tier != GPU})
    return f"{(text or '-')[:BELOW]:<{BELOW}}"


def row_segments(c: dict, ordinal: int, palette: Palette | None = None, below: bool = False) -> list[Segment]:
    ttft = "/".join(fmt_seconds(v) for v in c["ttft"]) if any(v is not None for v in c["ttft"]) else "-"
    stream = f"gaps {c['gaps']} lost {c['lost']} restarts {c['restarts']} malformed {c['malformed']}"
    offload = offload_text(c.get("offload") or {})
    if offload:
        stream = offload + " · " + stream
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
        *([Segment(below_text(c.get("tiers") or {}) + " ")] if below else []),
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
    lower: dict = {}
    for c in view.workers:
        for tier, n in (c.get("tiers") or {}).items():
            if tier != GPU:
                lower[tier] = lower.get(tier, 0) + n
    below = any(lower.values())
    held = total + sum(lower.values())
    lines = [
        [
            Segment(
                f"{len(view.workers)} workers · {total:,} resident blocks"
                + (f" · below the GPU: {tiers_text(lower)}" if below else "")
                + f" · {unique:,} distinct (group, hash) blocks held · {max(0, held - unique):,} duplicate "
                "copies across workers and tiers",
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
        [Segment(COLUMNS_BELOW if below else COLUMNS, heading)],
    ]
    for i, cells in enumerate(view.workers):
        lines.append(row_segments(cells, i, palette, below))
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
