"""The what-if view: a headline, the hit-rate curve (whatif_curve.py), predicted against served TTFT when the
run predicted latency (whatif_latency.py), the miss causes as bars, and the fleet table when the run had
workers. It draws one what-if summary (kvtui/whatif/report.py's `summary_event`, the
fields of the `whatif_summary` event), from `kvtui whatif --ui` or from a simulated trace in replay.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import DataTable, Static

from kvtui.whatif.beyond import ONE_PASS_LABEL, OPTIMAL_LABEL, beyond_line
from kvtui.whatif.capacity import human_tokens
from kvtui.whatif.causes import CAUSES, shares_sentence
from kvtui.whatif.precisions import rounded_line
from kvtui.whatif.tier_report import point_key, significant
from kvtui.widgets.base import TextLine
from kvtui.widgets.palette import markup
from kvtui.widgets.whatif_curve import WhatIfCurve
from kvtui.widgets.whatif_heatmap import TierHeatMap
from kvtui.widgets.whatif_latency import LatencyScatter, latency_line

# cause -> palette role of its bar
CAUSE_ROLES = {
    "compulsory": "prefill",
    "capacity": "eviction",
    "block_floor": "recompute",
    "salt": "edit",
    "divergence": "sink",
    "in_flight": "series-request",
    "preemption": "series-block-cum",
    "last_token": "dim",
    "disabled": "free",
    "too_large": "warning",
}
BAR = "█"
NOT_WHATIF = (
    "This trace is not a what-if run. `kvtui whatif WORKLOAD -o TRACE` writes one whose replay shows its "
    "curve, miss causes and fleet here; `kvtui whatif WORKLOAD --ui` shows them without a trace."
)


def headline(summary: dict) -> Content:
    """The workload, the current configuration (and what a rounded capacity became), its simulated hit rate
    beside the whole-prompt-block figures, why it may score above them, and its tiers' split."""
    current = summary.get("current") or {}
    key = point_key(current) if current else None
    sim = [p for p in summary.get("points") or [] if p["method"] == "simulated"]
    mine = next((p for p in sim if point_key(p) == key), None)
    parts = [
        (f"{summary['workload']}", markup("bold")),
        f" ({summary['format']}, {summary['requests']:,} requests, "
        f"{human_tokens(summary['prompt_tokens'])} prompt tokens)   ceiling ",
        (f"{100 * summary['ceiling']:.1f}%", markup("dim")),
        "\n",
    ]
    if current:
        parts += [
            "current ",
            (
                f"{human_tokens(current['capacity_tokens'])} {current['eviction']} bs {current['block_size']}"
                + (f" at {current['kv_dtype']}" if current.get("kv_dtype") else "")
                + _lower_tiers(current),
                markup("edit"),
            ),
            _rounded(summary, current),
        ]
    if mine is not None:
        parts += [": ", (f"{100 * mine['token_hit_rate']:.1f}%", markup("series-time")), " simulated"]
    cap = current.get("capacity_tokens")
    one_pass = None
    for p in summary.get("points") or []:
        if p["method"] == "one-pass" and point_key(p) == key:
            parts += [f", {100 * p['token_hit_rate']:.1f}% {ONE_PASS_LABEL}"]
            one_pass = p
    for p in summary.get("optimal") or []:
        if p["capacity_tokens"] == cap:
            parts += [
                ", ",
                (f"{100 * p['token_hit_rate']:.1f}%", markup("series-request")),
                f" {OPTIMAL_LABEL}",
            ]
    above = beyond_line(mine, summary["prompt_tokens"]) if mine is not None else None
    if above is not None:
        parts += ["\n", (above, markup("dim"))]
    # the split of the run whose hit rate is shown: the simulated one, else the one-pass model's
    shown = mine if mine is not None else one_pass
    if shown is not None and shown.get("tiers"):
        parts += ["\n", _split(shown)]
    return Content.assemble(*parts)


def _rounded(summary: dict, current: dict) -> str:
    """` (1k -> 992 tokens (62 blocks of 16))` when the current capacity was rounded down to whole blocks."""
    at = (current["capacity_tokens"], current["block_size"])
    for entry in summary.get("capacities_rounded") or []:
        # the device's capacity (a host or disk one names its tier)
        if not entry.get("tier") and (entry["capacity_tokens"], entry["block_size"]) == at:
            return f" ({rounded_line(entry)})"
    return ""


def _lower_tiers(current: dict) -> str:
    host, disk = current.get("host_capacity_tokens"), current.get("disk_capacity_tokens")
    return (f" + host {human_tokens(host)}" if host else "") + (
        f" + disk {human_tokens(disk)}" if disk else ""
    )


def _split(point: dict) -> str:
    """A tiered point's hits per tier (of the run named: simulated or one-pass) and the prefill seconds they
    save."""
    tiers = point["tiers"]
    shares = ", ".join(
        f"{100 * tiers[t]:.1f}% {t}" for t in ("device", "host", "disk") if t == "device" or tiers[t]
    )
    saved = point.get("prefill_seconds_saved")
    return f"tiers ({point['method']}): {shares}" + (
        "" if saved is None else f"; {significant(saved)} s of prefill saved against the device alone"
    )


def cause_bars(misses: dict, prompt_tokens: int, width: int = 40) -> Content:
    """One bar per cause present, as a share of all prompt tokens (the longest bar is `width` cells)."""
    if not misses or not prompt_tokens:
        return Content.styled("no missed prompt tokens", markup("dim"))
    top = max(misses.values()) or 1
    parts: list = [(shares_sentence(prompt_tokens, _counter(misses)) + "\n", markup("bold"))]
    order = sorted(
        (c for c in misses if misses[c]), key=lambda c: (-misses[c], CAUSES.index(c) if c in CAUSES else 99)
    )
    for cause in order:
        tokens = misses[cause]
        cells = max(1, round(width * tokens / top))
        parts += [
            f"{cause.replace('_', ' '):>12} ",
            (BAR * cells, markup(CAUSE_ROLES.get(cause, "dim"))),
            f" {100 * tokens / prompt_tokens:5.1f}%  {tokens:,} tokens\n",
        ]
    return Content.assemble(*parts)


def _counter(misses: dict):
    from collections import Counter

    return Counter(misses)


def fleet_line(fleet: dict) -> Content:
    return Content.assemble(
        (
            f"fleet: {fleet['workers']} workers x {human_tokens(fleet['capacity_tokens_per_worker'])}, "
            f"router {fleet['router']}: ",
            markup("bold"),
        ),
        f"hit rate {100 * fleet['token_hit_rate']:.1f}%; " + _regret(fleet) + "; "
        f"one shared cache {100 * fleet['global_cache_token_hit_rate']:.1f}%; "
        f"{fleet['duplicated_blocks']:,} of {fleet['cached_blocks']:,} cached blocks duplicated",
    )


def _regret(fleet: dict) -> str:
    if "reachable_hit_rate" in fleet:
        return (
            f"reachable {100 * fleet['reachable_hit_rate']:.1f}%, achieved "
            f"{100 * fleet['achieved_hit_rate']:.1f}% (regret {100 * fleet['regret']:.1f} points)"
        )
    # a summary written before reachable and achieved were measured
    return (
        f"longest-prefix router {100 * fleet['longest_prefix_token_hit_rate']:.1f}% "
        f"(regret {100 * fleet['regret']:.1f} points)"
    )


class WhatIfView(Vertical, can_focus=True):
    DEFAULT_CSS = """
    WhatIfView { height: 1fr; }
    WhatIfView #whatif-head { height: auto; }
    WhatIfView #whatif-causes { height: auto; max-height: 12; }
    WhatIfView #whatif-heatmap { max-height: 14; }
    WhatIfView #whatif-latency-head { height: auto; }
    WhatIfView #whatif-fleet-head { height: 2; }
    WhatIfView #whatif-fleet { height: auto; max-height: 10; }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.summary: dict | None = None

    def compose(self) -> ComposeResult:
        yield TextLine(id="whatif-head")
        yield WhatIfCurve(id="whatif-curve")
        yield TierHeatMap(id="whatif-heatmap")
        yield TextLine(id="whatif-latency-head")
        yield LatencyScatter(id="whatif-latency")
        yield Static(id="whatif-causes")
        yield TextLine(id="whatif-fleet-head")
        yield DataTable(id="whatif-fleet", show_cursor=False, zebra_stripes=True)

    def show(self, summary: dict | None) -> None:
        """Draw `summary` (None: say that this is no what-if run)."""
        if summary is self.summary and summary is not None:
            return
        self.summary = summary
        head = self.query_one("#whatif-head", TextLine)
        causes = self.query_one("#whatif-causes", Static)
        self.query_one("#whatif-curve", WhatIfCurve).show(summary)
        self.query_one("#whatif-heatmap", TierHeatMap).show(
            ((summary or {}).get("tiers") or {}).get("surface")
        )
        latency = (summary or {}).get("latency")
        self.query_one("#whatif-latency", LatencyScatter).show(latency)
        self.query_one("#whatif-latency-head").display = bool(latency)
        self.query_one("#whatif-latency-head", TextLine).set(Content(latency_line(latency)))
        fleet = (summary or {}).get("fleet")
        self.query_one("#whatif-fleet-head").display = bool(fleet)
        self.query_one("#whatif-fleet").display = bool(fleet)
        if summary is None:
            head.set(Content.styled(NOT_WHATIF, markup("dim")))
            causes.update("")
            return
        head.set(headline(summary))
        causes.update(cause_bars(summary.get("misses") or {}, summary["prompt_tokens"]))
        if fleet:
            self.query_one("#whatif-fleet-head", TextLine).set(fleet_line(fleet))
            table = self.query_one("#whatif-fleet", DataTable)
            table.clear(columns=True)
            table.add_columns("worker", "requests", "prompt tokens", "hit rate", "preemptions")
            for w in fleet["per_worker"]:
                table.add_row(
                    f"w{w['worker']}",
                    f"{w['requests']:,}",
                    f"{w['prompt_tokens']:,}",
                    f"{100 * w['token_hit_rate']:.1f}%",
                    f"{w['preemptions']:,}",
                )
