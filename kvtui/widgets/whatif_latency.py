"""Predicted against served latency, one point per request, drawn by Textualize's Plotext widget
(textual-plotext): the `latency` of a what-if summary (`kvtui whatif LOG --latency` or `--calibrate`,
kvtui/whatif/latency_fit.py). TTFT on both axes in ms, with the line where prediction equals service; the
title states the costs and the errors at p50 and p95 of TTFT and TPOT. Hidden when the summary has none.
Series colours are the palette's roles, read from the theme (`Palette.of`).
"""

from __future__ import annotations

from textual_plotext import PlotextPlot

from kvtui.widgets.palette import COMPONENT_CLASSES, Palette, role_css
from kvtui.widgets.whatif_curve import _rgb

# series -> palette role
SERIES = {"requests": "series-time", "equal": "dim"}


class LatencyScatter(PlotextPlot):
    COMPONENT_CLASSES = COMPONENT_CLASSES
    DEFAULT_CSS = "LatencyScatter { height: 1fr; min-height: 10; }\n" + role_css("LatencyScatter")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.latency: dict | None = None
        self.display = False

    def show(self, latency: dict | None) -> None:
        if latency is not self.latency:
            self.latency = latency
            self.display = bool(latency and points(latency))
            self.refresh()

    def render(self):
        self._draw(self.latency)
        return super().render()

    def _draw(self, latency: dict | None) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        pairs = points(latency) if latency else []
        if not pairs:
            plt.title("no served latency")
            return
        palette = Palette.of(self)
        served, predicted = zip(*pairs)
        top = max(max(served), max(predicted))
        plt.plot([0, top], [0, top], color=_rgb(palette, SERIES["equal"]), marker="braille")
        plt.scatter(served, predicted, marker="●", color=_rgb(palette, SERIES["requests"]), label="requests")
        plt.xlabel("served TTFT (ms)")
        plt.ylabel("predicted TTFT (ms)")
        plt.title(title(latency))


def points(latency: dict) -> list[tuple[float, float]]:
    """(served, predicted) TTFT in ms of each request that has both."""
    return [
        (1e3 * row["ttft"][0], 1e3 * row["ttft"][1])
        for row in latency.get("per_request") or ()
        if row["ttft"][0] is not None and row["ttft"][1] is not None
    ]


def title(latency: dict) -> str:
    def errors(name: str) -> str:
        e = latency[name]["error"]
        return f"{name.upper()} p50 {e['p50']:+.1%} p95 {e['p95']:+.1%}"

    how = "calibrated on this log" if latency.get("calibration") else "stated costs"
    return f"predicted against served ({how}): {errors('ttft')}, {errors('tpot')}"
