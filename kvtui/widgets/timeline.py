"""Timelines: one lane per request over trace time, and TTFT / TPOT / ITL percentiles.

Lane glyphs: `·` queued (arrived, not yet scheduled), `█` prefill chunk, `▪` decode step, `─` running between
events, `E` edit, `P` preempted, `┃` finished. The time axis spans the whole trace up to now. The selected
request's lane is highlighted. TTFT = queueing + prefill + sampling up to the first token;
TPOT = (t_last - t_first) / (n - 1); ITL = gap between consecutive tokens of one request.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.content import Content
from textual.message import Message
from textual.strip import Strip

from engine.trace.metrics import PERCENTILES, latency_summaries
from kvtui.state import CacheState, RequestRecord
from kvtui.widgets.base import LineView, fmt_seconds, pad, plural
from kvtui.widgets.palette import Palette, markup, owner_markup, theme_palette

LABEL = 10
# mark -> (glyph, colour role (kvtui/widgets/palette.py))
GLYPHS = {
    "prefill": ("█", "prefill"),
    "decode": ("▪", "decode"),
    "edit": ("E", "edit-mark"),
    "preempted": ("P", "preempt"),
    "finished": ("┃", "dim"),
    "scheduled": ("▏", "prefill"),
}
PRIORITY = {"edit": 5, "preempted": 4, "prefill": 3, "finished": 2, "decode": 1, "scheduled": 0}
QUEUED = ("·", "dim")
RUNNING = ("─", "running")


class TimelineView(LineView):
    BINDINGS = [
        Binding("up", "move(-1)", "request up", show=False, id="lanes.up"),
        Binding("down", "move(1)", "request down", show=False, id="lanes.down"),
    ]

    class RequestSelected(Message):
        def __init__(self, request_id: str):
            super().__init__()
            self.request_id = request_id

    def row_count(self, width: int) -> int:
        state = self.view.state
        return 1 + (len(state.order) if state is not None else 0)

    def render_row(self, row: int, width: int) -> Strip:
        state = self.view.state
        palette = self.palette()
        dim = palette["dim"]
        if state is None:
            return pad([Segment("no trace yet", dim)], width)
        span = max(state.t, 1e-9)
        cols = max(1, width - LABEL)
        if row == 0:
            axis = f"0s{'':{max(0, cols - 12)}}{state.t:.2f}s"
            return pad(
                [Segment(f"{'request':<{LABEL}}", palette["heading"]), Segment(axis[:cols], dim)], width
            )
        rid = state.order[row - 1]
        req = state.requests[rid]
        label_style = palette.owner(req.ordinal) + palette["bold"]
        if rid == self.view.request_id:
            label_style += palette["cursor"]
        cells = lane_cells(req, span, cols, state.t, palette)
        segs = [Segment(f"{rid[: LABEL - 1]:<{LABEL - 1}} ", label_style)]
        segs += [Segment(glyph, style) for glyph, style in cells]
        return pad(segs, width)

    def action_move(self, delta: int) -> None:
        state = self.view.state
        if state is None or not state.order:
            return
        rid = self.view.request_id
        i = state.order.index(rid) if rid in state.requests else -1
        i = max(0, min(len(state.order) - 1, i + delta))
        self.scroll_to_row(i + 1)
        self.post_message(self.RequestSelected(state.order[i]))

    def on_click(self, event) -> None:
        state = self.view.state
        row = event.y + int(self.scroll_offset.y) - 1
        if state is not None and 0 <= row < len(state.order):
            self.post_message(self.RequestSelected(state.order[row]))


def lane_cells(
    req: RequestRecord, span: float, cols: int, now: float, palette: Palette | None = None
) -> list[tuple[str, Style]]:
    """One (glyph, style) per column for a request's lane."""

    def col(t: float) -> int:
        return max(0, min(cols - 1, int(t / span * cols)))

    palette = palette or theme_palette()
    glyphs = {kind: (glyph, palette[role]) for kind, (glyph, role) in GLYPHS.items()}
    glyphs["finished"] = (glyphs["finished"][0], glyphs["finished"][1] + palette["bold"])
    queued = (QUEUED[0], palette[QUEUED[1]])
    running = (RUNNING[0], palette[RUNNING[1]])

    cells: list[tuple[str, Style] | None] = [None] * cols
    # the lane's ground, from its marks in time order: queued until it runs (and again after a preemption or an
    # edit of a finished run, until it is scheduled again), running until it finishes
    phases = {
        "arrived": queued,
        "preempted": queued,
        "scheduled": running,
        "prefill": running,
        "decode": running,
    }
    ground, since = None, None
    for t, kind, _step in sorted(req.marks, key=lambda mark: mark[0]):
        if since is not None and ground is not None:
            for c in range(col(since), col(t)):
                cells[c] = ground
        if kind == "finished":
            ground = None
        elif kind == "edit":
            # an edit of a finished request queues it; a running one keeps running
            ground = queued if ground is None else ground
        else:
            ground = phases.get(kind, ground)
        since = t
    if ground is not None and since is not None:
        for c in range(col(since), col(now) + 1):
            cells[c] = ground
    best = [-1] * cols
    for t, kind, _step in req.marks:
        glyph = glyphs.get(kind)
        if glyph is None:
            continue
        c = col(t)
        if PRIORITY[kind] > best[c]:
            best[c] = PRIORITY[kind]
            cells[c] = glyph
    blank = (" ", Style())
    return [cell or blank for cell in cells]


def latency_values(state: CacheState, last: int | None = None) -> dict[str, list[float]]:
    """TTFT and TPOT of each request (its latest run), and every inter-token gap, as engine/trace/metrics.py defines
    them; `last`: only the most recent `last` requests (and 8 x as many gaps)."""
    order = state.order if last is None else state.order[-last:]
    reqs = [state.requests[rid] for rid in order]
    return {
        "ttft": [r.ttft for r in reqs if r.ttft is not None],
        "tpot": [r.tpot for r in reqs if r.tpot is not None],
        "itl": state.itl_values(last=None if last is None else last * 8),
    }


def latency_summary(state: CacheState | None, last: int = 2000) -> Content:
    """TTFT / TPOT / ITL p50 / p95 / p99 over the most recent `last` requests, plus the selected request."""
    if state is None:
        return Content("")
    values = latency_values(state, last)
    summaries = latency_summaries(values["ttft"], values["tpot"], values["itl"])
    parts: list = []
    for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl")):
        found = summaries[key]
        values_text = " ".join(f"p{q} {fmt_seconds(found[f'p{q}'])}" for q in PERCENTILES)
        parts += [(f"{name} ", markup("bold")), values_text, (f" (n={found['n']})   ", markup("dim"))]
    return Content.assemble(*parts)


def request_summary(req: RequestRecord | None) -> Content:
    if req is None:
        return Content.styled("no request selected", markup("dim"))
    parts: list = [
        (f"{req.request_id} ", f"{owner_markup(req.ordinal)} bold"),
        (
            f"{req.status_text}  prompt {req.prompt_len}  generated {req.num_output}  cached {req.cached_tokens}  "
            f"TTFT {fmt_seconds(req.ttft)}  TPOT {fmt_seconds(req.tpot)}"
        ),
    ]
    if req.edits:
        parts.append((f"  edits {len(req.edits)}", markup("edit")))
    if req.parent_id:
        parts.append((f"  forked from {req.parent_id}", markup("dim")))
    parts.append(window_facts(req))
    return Content.assemble(*parts)


def window_facts(req: RequestRecord) -> Content:
    """Window-layer facts of a request, when the trace has them: where its rings restarted, sink divergence."""
    parts: list = []
    resume = req.ring_resume
    if resume:
        text = (
            f"  ring restart at {resume.get('position')} (wanted {resume.get('wanted')}, from "
            f"{resume.get('source')}, +{resume.get('recompute_tokens')} tok)"
        )
        parts.append((text, markup("ring-bar")))
    sink = req.sink_divergence
    if sink:
        text = (
            f"  sinks S={sink.get('sink_tokens')} W={sink.get('window')}: max logit diff "
            f"{sink.get('max_logit_diff', 0):.3g}, {sink.get('argmax_changed')} of "
            f"{plural(len(sink.get('positions') or []), 'token')} differ from full attention"
        )
        parts.append((text, markup("recompute")))
    return Content.assemble(*parts)
