"""The what-if hit-rate curve: token hit rate against cache capacity on a log axis, drawn by Textualize's
Plotext widget (textual-plotext).

Drawn from a what-if summary (kvtui/whatif/report.py's `summary_event`: the shape of the `whatif_summary`
event): the one-pass LRU curve at log-spaced capacities (a line), the ceiling of an infinite cache (a
horizontal line), Belady's optimal bound and the simulated runs at the chosen capacities (points), and the
current configuration (a vertical line); with tiers, the device and host together, and with the disk, against
the device's capacity (the curve per tier; the LRU line is then the device alone). Series colours are the palette's roles, read from the theme
(`Palette.of`), so a theme switch restyles the plot; the plot's ground and text follow the theme through
textual-plotext's "auto" theme.
"""

from __future__ import annotations

from textual_plotext import PlotextPlot

from kvtui.whatif.beyond import ONE_PASS_LABEL, OPTIMAL_LABEL
from kvtui.whatif.capacity import human_tokens
from kvtui.widgets.palette import COMPONENT_CLASSES, Palette, role_css

# series -> palette role
SERIES = {
    "lru": "series-token",
    "ceiling": "dim",
    "optimal": "series-request",
    "simulated": "series-time",
    "current": "edit",
    "host": "series-block",
    "disk": "series-block-cum",
}


def _rgb(palette: Palette, role: str):
    """The role's foreground as an (r, g, b) tuple for Plotext (None: Plotext's default)."""
    color = palette[role].color
    if color is None:
        return None
    triplet = color.get_truecolor()
    return (triplet.red, triplet.green, triplet.blue)


class WhatIfCurve(PlotextPlot):
    COMPONENT_CLASSES = COMPONENT_CLASSES
    DEFAULT_CSS = "WhatIfCurve { height: 1fr; min-height: 10; }\n" + role_css("WhatIfCurve")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.summary: dict | None = None

    def show(self, summary: dict | None) -> None:
        if summary is not self.summary:
            self.summary = summary
            self.refresh()

    def render(self):
        self._draw(self.summary)
        return super().render()

    def _draw(self, summary: dict | None) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.ylim(0, 100)
        plt.ylabel("token hit %")
        if not summary or not summary.get("curve"):
            plt.title("no what-if curve")
            return
        palette = Palette.of(self)
        curve = summary["curve"]
        xs = [p["capacity_tokens"] for p in curve]
        plt.xscale("log")
        plt.plot(
            xs,
            [100 * p["token_hit_rate"] for p in curve],
            color=_rgb(palette, SERIES["lru"]),
            label=ONE_PASS_LABEL + (", device alone" if summary.get("tiers") else ""),
            marker="braille",
        )
        plt.hline(100 * summary["ceiling"], color=_rgb(palette, SERIES["ceiling"]))
        self._draw_tiers(summary.get("tiers"), palette)
        optimal = summary.get("optimal") or []
        if optimal:
            plt.scatter(
                [p["capacity_tokens"] for p in optimal],
                [100 * p["token_hit_rate"] for p in optimal],
                marker="◆",
                color=_rgb(palette, SERIES["optimal"]),
                label=OPTIMAL_LABEL,
            )
        simulated = [p for p in summary.get("points") or [] if p["method"] == "simulated"]
        if simulated:
            plt.scatter(
                [p["capacity_tokens"] for p in simulated],
                [100 * p["token_hit_rate"] for p in simulated],
                marker="●",
                color=_rgb(palette, SERIES["simulated"]),
                label="simulated",
            )
        current = summary.get("current")
        if current:
            plt.vline(current["capacity_tokens"], color=_rgb(palette, SERIES["current"]))
        low, high = min(xs), max(xs + [p["capacity_tokens"] for p in optimal + simulated])
        ticks, tick = [], 1
        while tick <= high * 10:
            if low / 10 <= tick <= high * 10:
                ticks.append(tick)
            tick *= 10
        plt.xticks(ticks, [human_tokens(t) for t in ticks])
        plt.xlabel(
            f"{'device ' if summary.get('tiers') else ''}cache capacity (tokens, log)   ─ ceiling {100 * summary['ceiling']:.1f}%   │ current"
        )

    def _draw_tiers(self, tiers: dict | None, palette: Palette) -> None:
        """The curve per tier: what the device and the host serve together, and with the disk, against the
        device's capacity (the LRU line is the device alone)."""
        if not tiers or not tiers.get("curve"):
            return
        plt, curve, current = self.plt, tiers["curve"], tiers["current"]
        xs = [p["capacity_tokens"] for p in curve]
        host = human_tokens(current["host_capacity_tokens"])
        plt.plot(
            xs,
            [100 * (p["device"] + p["host"]) for p in curve],
            color=_rgb(palette, SERIES["host"]),
            label=f"+ host {host}",
            marker="braille",
        )
        if current["disk_capacity_tokens"]:
            plt.plot(
                xs,
                [100 * (p["device"] + p["host"] + p["disk"]) for p in curve],
                color=_rgb(palette, SERIES["disk"]),
                label=f"+ disk {human_tokens(current['disk_capacity_tokens'])}",
                marker="braille",
            )
