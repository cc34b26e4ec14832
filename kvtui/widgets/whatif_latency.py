"""The what-if latency scatter: each request of a proxy log at its served TTFT (x) and the twin's predicted one
(y), beside the line where they are equal; the what-if view writes p50 and p95 of both and their error above
it (`latency_line`). Drawn from a
what-if summary's `latency` (kvtui/whatif/latency_fit.py's section, `kvtui whatif LOG --latency` or
`--calibrate`); hidden when the run predicted no latency.
"""

from __future__ import annotations

from textual_plotext import PlotextPlot

from kvtui.widgets.palette import COMPONENT_CLASSES, Palette, role_css
from kvtui.widgets.whatif_curve import _rgb


def ms_pairs(latency: dict, name: str) -> list[tuple[float, float]]:
    """(served, predicted) of `name` (ttft or tpot) in ms, for the requests that have both."""
    pairs = []
    for row in latency.get("per_request") or ():
        served, guess = row.get(name) or (None, None)
        if served is not None and guess is not None:
            pairs.append((served * 1e3, guess * 1e3))
    return pairs


def error_title(latency: dict, name: str, label: str) -> str:
    """`TTFT p50 1611 -> 1614 ms (+0.2%), p95 2273 -> 2300 ms (+1.2%)`: served -> predicted, and the error."""
    figures = latency.get(name) or {}
    parts = []
    for q in ("p50", "p95"):
        served = (figures.get("served") or {}).get(q)
        guess = (figures.get("predicted") or {}).get(q)
        error = (figures.get("error") or {}).get(q)
        if served is not None and guess is not None and error is not None:
            parts.append(f"{q} {served * 1e3:.0f} -> {guess * 1e3:.0f} ms ({100 * error:+.1f}%)")
    return f"{label} served -> predicted: " + ", ".join(parts) if parts else f"{label}: none served"


def latency_line(latency: dict | None) -> str:
    """The line above the scatter: TTFT's and TPOT's served -> predicted, and the costs they came from."""
    if not latency:
        return ""
    costs = "calibrated on this log" if latency.get("calibration") else f"costs: {latency.get('cost')}"
    return (
        f"{error_title(latency, 'ttft', 'TTFT')}\n{error_title(latency, 'tpot', 'TPOT')}\n"
        f"{latency.get('requests', 0)} requests, {costs}"
    )


class LatencyScatter(PlotextPlot):
    COMPONENT_CLASSES = COMPONENT_CLASSES
    DEFAULT_CSS = "LatencyScatter { height: 1fr; min-height: 10; }\n" + role_css("LatencyScatter")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.latency: dict | None = None

    def show(self, latency: dict | None) -> None:
        self.display = bool(latency and latency.get("per_request"))
        if latency is not self.latency:
            self.latency = latency
            self.refresh()

    def render(self):
        self._draw(self.latency)
        return super().render()

    def _draw(self, latency: dict | None) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        pairs = ms_pairs(latency or {}, "ttft")
        if not pairs:
            plt.title("no latency predicted (kvtui whatif LOG --latency)")
            return
        palette = Palette.of(self)
        top = max(max(p) for p in pairs) * 1.05
        plt.plot([0, top], [0, top], color=_rgb(palette, "dim"), label="predicted = served", marker="braille")
        plt.scatter(
            [p[0] for p in pairs],
            [p[1] for p in pairs],
            marker="●",
            color=_rgb(palette, "series-time"),
            label=f"{len(pairs)} requests",
        )
        plt.xlim(0, top)
        plt.ylim(0, top)
        plt.xlabel("served TTFT (ms)")
        plt.ylabel("predicted (ms)")
