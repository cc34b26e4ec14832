"""The attach app's requests: one lane per request `kvtui proxy` saw, on the shared lane drawing
(kvtui/widgets/lanes.py), and the TTFT / TPOT line above them.

A lane runs from the request's arrival to its last token: `█` until the first token (TTFT: queueing and
prefill, which the proxy cannot tell apart), `─` while it decodes, `┃` at the last token, or `≠` where kvtui's
prediction of its cached tokens disagreed with vLLM's (its label is drawn in the warning role too). The axis
starts at the earliest arrival shown. up / down (and [ ]) move the selection, as on the engine's lanes.
"""

from __future__ import annotations

from rich.style import Style
from textual.binding import Binding
from textual.content import Content
from textual.message import Message

from kvtui.state.proxy_requests import LAST, ProxyRequest, ProxyRequests
from kvtui.widgets.lanes import Cell, LanesView, column, paint
from kvtui.widgets.palette import Palette, markup
from kvtui.widgets.timeline import quantiles_line

# phase -> (glyph, colour role (kvtui/widgets/palette.py))
GLYPHS = {
    "ttft": ("█", "prefill"),
    "decode": ("─", "decode"),
    "last": ("┃", "dim"),
    "disagrees": ("≠", "warning"),
    "arrived": ("▏", "prefill"),
}


class ProxyLanesView(LanesView):
    BINDINGS = [
        Binding("left_square_bracket", "move(-1)", "prev request", show=False, id="proxy.prev"),
        Binding("right_square_bracket", "move(1)", "next request", show=False, id="proxy.next"),
    ]
    EMPTY = "no request yet (kvtui proxy --log LOG writes them; kvtui attach --requests LOG reads them)"

    class RequestSelected(Message):
        def __init__(self, request_id: str):
            super().__init__()
            self.request_id = request_id

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.requests = ProxyRequests()
        self.selected: str | None = None

    def update_requests(self, requests: ProxyRequests, selected: str | None) -> None:
        self.requests, self.selected = requests, selected
        self.refresh_rows()

    def lane_ids(self) -> list[str]:
        return self.requests.order

    def selected_id(self) -> str | None:
        return self.selected

    def axis_end(self) -> float | None:
        return self.requests.span if len(self.requests) else None

    def lane(self, lane_id: str, span: float, cols: int, palette: Palette) -> tuple[Style, list[Cell]]:
        req = self.requests.by_id[lane_id]
        label = palette["warning"] if req.disagrees else palette.owner(req.ordinal) + palette["bold"]
        return label, proxy_lane_cells(req, self.requests.t0, span, cols, palette)

    def select(self, lane_id: str) -> None:
        self.post_message(self.RequestSelected(lane_id))


def proxy_lane_cells(req: ProxyRequest, t0: float, span: float, cols: int, palette: Palette) -> list[Cell]:
    """One (glyph, style) per column: TTFT from the arrival (one column at least), then decode, then the end."""
    looks = {phase: (glyph, palette[role]) for phase, (glyph, role) in GLYPHS.items()}
    looks["last"] = (looks["last"][0], looks["last"][1] + palette["bold"])
    arrived = column(req.arrival - t0, span, cols)
    first, last = req.first_token, req.last_token
    if first is None or last is None:
        # no token came (an error, or the answer had none): the arrival alone
        return paint(cols, [], [(arrived, 0, looks["arrived"])])
    # a TTFT and an end short of a column still get one each (the axis' last column aside)
    decoding = min(max(column(first - t0, span, cols), arrived + 1), cols - 1)
    ended = max(column(last - t0, span, cols), decoding)
    runs = [(arrived, decoding, looks["ttft"]), (decoding, ended, looks["decode"])]
    end = looks["disagrees"] if req.disagrees else looks["last"]
    return paint(cols, runs, [(ended, 1, end)])


def proxy_summary(requests: ProxyRequests) -> Content:
    """Two lines: TTFT / TPOT quantiles over the requests shown; their count, disagreements and the legend."""
    found = requests.latencies()
    quantiles = quantiles_line([("TTFT", found["ttft"]), ("TPOT", found["tpot"])])
    n, wrong = len(requests), requests.disagreements()
    parts: list = [f"{n} request{'s' if n != 1 else ''} (the last {LAST} at most)"]
    if wrong:
        parts += ["  ", (f"{wrong} disagree with kvtui's prediction", markup("warning"))]
    parts += ["   "]
    for phase, meaning in (
        ("ttft", "TTFT"),
        ("decode", "decode"),
        ("last", "last token"),
        ("disagrees", "prediction disagrees"),
    ):
        glyph, role = GLYPHS[phase]
        parts += [(glyph, markup(role)), (f" {meaning}  ", markup("dim"))]
    return Content.assemble(quantiles, "\n", *parts)
