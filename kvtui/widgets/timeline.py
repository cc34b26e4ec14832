"""Timelines: one lane per request over trace time, and TTFT / TPOT / ITL percentiles.

Lane glyphs: `·` queued (arrived, not yet scheduled), `█` prefill chunk, `▪` decode step, `─` running between
events, `E` edit, `P` preempted, `┃` finished. The time axis spans the whole trace up to now. The selected
request's lane is highlighted. TTFT = queueing + prefill + sampling up to the first token;
TPOT = (t_last - t_first) / (n - 1); ITL = gap between consecutive tokens of one request.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.strip import Strip

from engine.trace.metrics import PERCENTILES, latency_summaries
from kvtui.state import CacheState, RequestRecord
from kvtui.widgets.base import BOLD, CURSOR, DIM, HEADING, LineView, fmt_seconds, owner_style, pad

LABEL = 10
GLYPHS = {"prefill": ("█", Style(color="#4e9ad6")), "decode": ("▪", Style(color="#59b26a")),
          "edit": ("E", Style(color="#111111", bgcolor="#c26fd1", bold=True)),
          "preempted": ("P", Style(color="#ffffff", bgcolor="#b03a48", bold=True)),
          "finished": ("┃", Style(color="#7f7f7f", bold=True)),
          "scheduled": ("▏", Style(color="#4e9ad6"))}
PRIORITY = {"edit": 5, "preempted": 4, "prefill": 3, "finished": 2, "decode": 1, "scheduled": 0}
QUEUED = ("·", Style(color="#7f7f7f"))
RUNNING = ("─", Style(color="#3f5f3f"))


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
        if state is None:
            return pad([Segment("no trace yet", DIM)], width)
        span = max(state.t, 1e-9)
        cols = max(1, width - LABEL)
        if row == 0:
            axis = f"0s{'':{max(0, cols - 12)}}{state.t:.2f}s"
            return pad([Segment(f"{'request':<{LABEL}}", HEADING), Segment(axis[:cols], DIM)], width)
        rid = state.order[row - 1]
        req = state.requests[rid]
        label_style = owner_style(req.ordinal) + BOLD
        if rid == self.view.request_id:
            label_style += CURSOR
        cells = lane_cells(req, span, cols, state.t)
        segs = [Segment(f"{rid[:LABEL - 1]:<{LABEL - 1}} ", label_style)]
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


def lane_cells(req: RequestRecord, span: float, cols: int, now: float) -> list[tuple[str, Style]]:
    """One (glyph, style) per column for a request's lane."""
    def col(t: float) -> int:
        return max(0, min(cols - 1, int(t / span * cols)))

    cells: list[tuple[str, Style] | None] = [None] * cols
    start = col(req.arrived)
    scheduled = req.scheduled
    end = col(req.finished) if req.finished is not None else col(now)
    run_from = col(scheduled) if scheduled is not None else end + 1
    for c in range(start, min(run_from, end + 1)):
        cells[c] = QUEUED
    for c in range(run_from, end + 1):
        cells[c] = RUNNING
    best = [-1] * cols
    for t, kind, _step in req.marks:
        glyph = GLYPHS.get(kind)
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
    return {"ttft": [r.ttft for r in reqs if r.ttft is not None],
            "tpot": [r.tpot for r in reqs if r.tpot is not None],
            "itl": state.itl_values(last=None if last is None else last * 8)}


def latency_summary(state: CacheState | None, last: int = 2000) -> Text:
    """TTFT / TPOT / ITL p50 / p95 / p99 over the most recent `last` requests, plus the selected request."""
    if state is None:
        return Text("")
    values = latency_values(state, last)
    summaries = latency_summaries(values["ttft"], values["tpot"], values["itl"])
    out = Text()
    for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl")):
        found = summaries[key]
        out.append(f"{name} ", style="bold")
        out.append(" ".join(f"p{q} {fmt_seconds(found[f'p{q}'])}" for q in PERCENTILES))
        out.append(f" (n={found['n']})   ", style="dim")
    return out


def request_summary(req: RequestRecord | None) -> Text:
    if req is None:
        return Text("no request selected", style="dim")
    out = Text()
    out.append(f"{req.request_id} ", style=owner_style(req.ordinal) + BOLD)
    out.append(f"{req.status}  prompt {req.prompt_len}  generated {req.num_output}  cached {req.cached_tokens}  "
               f"TTFT {fmt_seconds(req.ttft)}  TPOT {fmt_seconds(req.tpot)}")
    if req.edits:
        out.append(f"  edits {len(req.edits)}", style="magenta")
    if req.parent_id:
        out.append(f"  forked from {req.parent_id}", style="dim")
    out.append_text(window_facts(req))
    return out


def window_facts(req: RequestRecord) -> Text:
    """Window-layer facts of a request, when the trace has them: where its rings restarted, sink divergence."""
    out = Text()
    resume = req.ring_resume
    if resume:
        out.append(f"  ring restart at {resume.get('position')} (wanted {resume.get('wanted')}, from "
                   f"{resume.get('source')}, +{resume.get('recompute_tokens')} tok)", style="cyan")
    sink = req.sink_divergence
    if sink:
        out.append(f"  sinks S={sink.get('sink_tokens')} W={sink.get('window')}: max logit diff "
                   f"{sink.get('max_logit_diff', 0):.3g}, {sink.get('argmax_changed')} of "
                   f"{len(sink.get('positions') or [])} tokens differ from full attention", style="yellow")
    return out
