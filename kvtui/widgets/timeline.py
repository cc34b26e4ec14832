"""Timelines: one lane per request over trace time, and TTFT / TPOT / ITL percentiles.

Lane glyphs: `·` queued (arrived, not yet scheduled), `█` prefill chunk, `▪` decode step, `─` running between
events, `E` edit, `P` preempted, `┃` finished. The time axis spans the whole trace up to now. The selected
request's lane is highlighted. TTFT = queueing + prefill + sampling up to the first token;
TPOT = (t_last - t_first) / (n - 1); ITL = gap between consecutive tokens of one request.
"""

from __future__ import annotations

from rich.style import Style
from textual.content import Content
from textual.message import Message

from engine.trace.metrics import PERCENTILES, latency_summaries
from kvtui.state import CacheState, RequestRecord
from kvtui.state.roofline import Roofline, StepPoint
from kvtui.widgets.base import fmt_seconds, plural, typed_words
from kvtui.widgets.lanes import Cell, LanesView, column, paint
from kvtui.widgets.palette import Palette, markup, owner_markup, theme_palette

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


class TimelineView(LanesView):
    """The engine's requests, one lane each, from a `View`'s state; the selection is the view's request."""

    class RequestSelected(Message):
        def __init__(self, request_id: str):
            super().__init__()
            self.request_id = request_id

    def lane_ids(self) -> list[str]:
        state = self.view.state
        return [] if state is None else state.order

    def selected_id(self) -> str | None:
        return self.view.request_id

    def axis_end(self) -> float | None:
        state = self.view.state
        return None if state is None else state.t

    def lane(self, lane_id: str, span: float, cols: int, palette: Palette) -> tuple[Style, list[Cell]]:
        state = self.view.state
        req = state.requests[lane_id]
        return palette.owner(req.ordinal) + palette["bold"], lane_cells(req, span, cols, state.t, palette)

    def select(self, lane_id: str) -> None:
        self.post_message(self.RequestSelected(lane_id))


def lane_cells(
    req: RequestRecord, span: float, cols: int, now: float, palette: Palette | None = None
) -> list[Cell]:
    """One (glyph, style) per column for a request's lane."""

    def col(t: float) -> int:
        return column(t, span, cols)

    palette = palette or theme_palette()
    glyphs = {kind: (glyph, palette[role]) for kind, (glyph, role) in GLYPHS.items()}
    glyphs["finished"] = (glyphs["finished"][0], glyphs["finished"][1] + palette["bold"])
    queued = (QUEUED[0], palette[QUEUED[1]])
    running = (RUNNING[0], palette[RUNNING[1]])

    # the lane's ground, from its marks in time order: queued until it runs (and again after a preemption or an
    # edit of a finished run, until it is scheduled again), running until it finishes
    phases = {
        "arrived": queued,
        "preempted": queued,
        "scheduled": running,
        "prefill": running,
        "decode": running,
    }
    runs = []
    ground, since = None, None
    for t, kind, _step in sorted(req.marks, key=lambda mark: mark[0]):
        if since is not None and ground is not None:
            runs.append((col(since), col(t), ground))
        if kind == "finished":
            ground = None
        elif kind == "edit":
            # an edit of a finished request queues it; a running one keeps running
            ground = queued if ground is None else ground
        else:
            ground = phases.get(kind, ground)
        since = t
    if ground is not None and since is not None:
        runs.append((col(since), col(now) + 1, ground))
    marks = [(col(t), PRIORITY[kind], glyphs[kind]) for t, kind, _step in req.marks if kind in glyphs]
    return paint(cols, runs, marks)


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
    return quantiles_line(
        [("TTFT", summaries["ttft"]), ("TPOT", summaries["tpot"]), ("ITL", summaries["itl"])]
    )


def quantiles_line(named: list[tuple[str, dict]]) -> Content:
    """`TTFT p50 1.0ms p95 ... (n=12)` for each (name, engine/trace/metrics.py summary) in turn."""
    parts: list = []
    for name, found in named:
        values_text = " ".join(f"p{q} {fmt_seconds(found[f'p{q}'])}" for q in PERCENTILES)
        parts += [(f"{name} ", markup("bold")), values_text, (f" (n={found['n']})   ", markup("dim"))]
    return Content.assemble(*parts)


# decode steps this many times the memory floor or more: more than Python and attention explain
BUSY_RATIO = 50


def timing_note(points: list[StepPoint], roof: Roofline | None) -> str:
    """Why the trace's TTFT and TPOT are what they are: its decode steps against the roofline the engine
    measured on the recording machine when the trace started (a TPOT is about one decode step)."""
    decode = sorted(p.duration for p in points if p.kind == "decode")
    if not decode:
        return ""
    median = decode[len(decode) // 2]
    if roof is None or roof.memory_floor <= 0:
        return (
            f"decode steps took {fmt_seconds(median)} (median) as recorded; no roofline event to compare with"
        )
    ratio = median / roof.memory_floor
    head = (
        f"decode steps: {fmt_seconds(median)} median = {ratio:.0f}x this machine's "
        f"{fmt_seconds(roof.memory_floor)} floor (reading the weights once)"
    )
    if ratio >= BUSY_RATIO:
        return head + ": it was busy with other work while recording, so TTFT/TPOT are the recording's"
    return head + "; Python per layer and attention add the rest · l: roofline"


def request_summary(req: RequestRecord | None) -> Content:
    if req is None:
        return Content.styled("no request selected", markup("dim"))
    parts: list = [
        (f"{req.request_id} ", f"{owner_markup(req.ordinal)} bold"),
        (
            f"{req.status_text}  prompt {req.prompt_len}  generated {req.num_generated}{typed_words(req, '  ')}"
            f"  cached {req.cached_tokens}"
            f"{cached_of(req)}  TTFT {fmt_seconds(req.ttft)}  TPOT {fmt_seconds(req.tpot)}"
        ),
    ]
    if req.edits:
        parts.append((f"  edits {len(req.edits)}", markup("edit")))
    if req.parent_id:
        parts.append((f"  forked from {req.parent_id}", markup("dim")))
    parts.append(window_facts(req))
    return Content.assemble(*parts)


def cached_of(req: RequestRecord) -> str:
    """After an edit the cached tokens count the edit's lookup, whose prompt is not the first one: say of how
    many, as the miss explainer does."""
    if not req.cached_of or req.cached_of == req.prompt_len:
        return ""
    return f" of {req.cached_of} at its latest lookup"


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
