"""Prefill vs decode on the roofline: every engine step as a point (tokens in the step, log x; its time, log y)
under this machine's roofline for the model, measured once at start (the trace's `roofline` event).

Decode steps sit on the flat memory floor (all weights read once per step, whatever the context: TPOT is flat);
prefill steps climb the compute slope (time grows with the tokens in the step: TTFT grows with the prompt).
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from engine.trace.metrics import percentile
from kvtui.state.roofline import RooflineScan, StepPoint, log_position
from kvtui.widgets.base import BuiltLinesView, fmt_bytes, fmt_seconds, pad, plural, wrap_segments

CHART_ROWS = 14
# y-axis label cells
LABEL = 9
# cells of a text line's label ("memory floor "): its wrapped rows start under the text
LABEL_TEXT = 13
# a step's kind is its colour role (kvtui/widgets/palette.py), drawn bold
KIND_ROLE = {"decode": "decode", "prefill": "prefill", "mixed": "mixed"}
KIND_GLYPH = {"decode": "●", "prefill": "▲", "mixed": "◆"}
# the roofline itself: the `recompute` role (warning), the cost every step pays
ROOF_ROLE = "recompute"


def _time(s: float) -> str:
    """Seconds down to microseconds (a tiny model's roofline is microseconds)."""
    if s < 1e-3:
        return f"{s * 1e6:.1f}µs"
    return fmt_seconds(s)


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.1f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


class RooflineView(BuiltLinesView):
    """Reads the event list it is given (`events`) up to the state's cursor; keeps its scan between frames."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.events: list[dict] = []
        self.scan = RooflineScan()
        self._key: tuple | None = None
        self._rows: list[Strip] = []

    # ------------------------------------------------------------------ building the lines (cached per frame)
    def _lines(self, width: int) -> list[Strip]:
        state = self.view.state
        cursor = state.index if state is not None else 0
        self.scan.update(self.events)
        key = (id(self.events), len(self.events), cursor, width, self.palette())
        if key != self._key:
            self._rows, self._key = self._build(self.scan.upto(cursor), width), key
        return self._rows

    def _build(self, points: list[StepPoint], width: int) -> list[Strip]:
        roof = self.scan.roofline
        palette = self.palette()
        dim, heading, bold = palette["dim"], palette["heading"], palette["bold"]
        # each line wraps at spaces (under its label) rather than being cut at the edge
        text: list[list[Segment]] = [
            [
                Segment("prefill vs decode on this machine's roofline", heading),
                Segment(" · x: tokens in the step (log) · y: the step's time (log)", dim),
            ]
        ]
        if roof is None:
            text.append(
                [
                    Segment(
                        "no roofline event in this trace (recorded before kvtui measured the machine): steps only",
                        dim,
                    )
                ]
            )
        else:
            text.append(
                [
                    Segment("memory floor ", bold),
                    Segment(
                        f"{fmt_bytes(roof.weight_bytes)} of weights / {_si(roof.mem_bandwidth, 'B/s')} = "
                        f"{_time(roof.memory_floor)} per step, whatever the tokens ({roof.device} {roof.dtype})"
                    ),
                ]
            )
            text.append(
                [
                    Segment("compute      ", bold),
                    Segment(
                        f"{_si(roof.flops_per_token, 'FLOP')} per token / {_si(roof.peak_flops, 'FLOP/s')} = "
                        f"{_time(roof.per_token)} per token · ridge at {roof.ridge:,.0f} tokens per step"
                    ),
                ]
            )
        text.append([Segment("measured     ", bold), Segment(self._summary(points, roof))])
        text.append([Segment("per request  ", bold), Segment(self._requests())])
        text.append(
            [Segment("decode steps read every weight once however long the context: TPOT stays flat.", dim)]
        )
        text.append(
            [
                Segment(
                    "a T-token prefill costs T x the compute per token past the ridge: TTFT grows with the prompt.",
                    dim,
                )
            ]
        )
        out = [
            strip for segments in text for strip in wrap_segments(segments, width, indent=" " * LABEL_TEXT)
        ]
        out += self._chart(points, roof, width)
        return out

    def _requests(self) -> str:
        """Finished requests by prompt length: TTFT follows the prompt, TPOT does not."""
        state = self.view.state
        done = [r for r in (state.requests.values() if state is not None else ()) if r.ttft is not None]
        if not done:
            return "no finished request yet"
        done.sort(key=lambda r: (r.prompt_len, r.request_id))
        # the shortest, two between, the longest
        if len(done) > 4:
            done = [done[0], done[len(done) // 3], done[2 * len(done) // 3], done[-1]]
        return " · ".join(
            f"{r.prompt_len} prompt tokens: TTFT {_time(r.ttft)}, TPOT "
            f"{_time(r.tpot) if r.tpot is not None else '-'}"
            for r in done
        )

    @staticmethod
    def _summary(points: list[StepPoint], roof) -> str:
        if not points:
            return "no engine step yet"
        decode = [p.duration for p in points if p.kind == "decode"]
        prefill = [p for p in points if p.kind == "prefill"]
        parts = [f"{plural(len(points), 'step')}"]
        if decode:
            step = percentile(decode, 50)
            floor = f" = {step / roof.memory_floor:,.1f}x the floor" if roof and roof.memory_floor > 0 else ""
            parts.append(f"decode: median {_time(step)} per step{floor}")
        if prefill:
            per_token = percentile([p.duration / p.tokens for p in prefill if p.tokens], 50)
            big = max(prefill, key=lambda p: p.tokens)
            parts.append(
                f"prefill: median {_time(per_token)} per token, {plural(big.tokens, 'token')} took "
                f"{_time(big.duration)}"
            )
        return " · ".join(parts)

    def _chart(self, points: list[StepPoint], roof, width: int) -> list[Strip]:
        palette = self.palette()
        dim, cursor = palette["dim"], palette["cursor"]
        kind_style = {kind: palette[role] + palette["bold"] for kind, role in KIND_ROLE.items()}
        roof_style = palette[ROOF_ROLE]
        cols = max(8, width - LABEL - 1)
        max_tokens = max([p.tokens for p in points] + [2])
        x_hi = max_tokens * 2
        if roof is not None:
            x_hi = max(x_hi, roof.ridge * 2)
        times = [p.duration for p in points if p.duration > 0]
        if roof is not None:
            times += [roof.memory_floor, roof.bound(int(x_hi))]
        if not times:
            return []
        y_lo, y_hi = min(times) / 1.5, max(times) * 1.5
        grid: list[list[tuple[str, Style]]] = [[(" ", dim)] * cols for _ in range(CHART_ROWS)]
        if roof is not None:
            for c in range(cols):
                # x axis from 1 token to x_hi, log
                n = x_hi ** (c / (cols - 1))
                r = CHART_ROWS - 1 - log_position(roof.bound(n), y_lo, y_hi, CHART_ROWS)
                grid[r][c] = ("─" if n <= roof.ridge else "╱", roof_style)
        rank = {"decode": 0, "mixed": 1, "prefill": 2}
        best: dict[tuple[int, int], StepPoint] = {}
        for p in points:
            cell = (
                CHART_ROWS - 1 - log_position(max(p.duration, y_lo), y_lo, y_hi, CHART_ROWS),
                log_position(max(p.tokens, 1), 1, x_hi, cols),
            )
            if cell not in best or rank[p.kind] >= rank[best[cell].kind]:
                best[cell] = p
        last = points[-1] if points else None
        for (r, c), p in best.items():
            style = kind_style[p.kind] + (cursor if p is last else Style())
            grid[r][c] = (KIND_GLYPH[p.kind], style)
        # the latest step always shows, highlighted
        if last is not None:
            r = CHART_ROWS - 1 - log_position(max(last.duration, y_lo), y_lo, y_hi, CHART_ROWS)
            c = log_position(max(last.tokens, 1), 1, x_hi, cols)
            grid[r][c] = (KIND_GLYPH[last.kind], kind_style[last.kind] + cursor)
        rows = []
        for r in range(CHART_ROWS):
            y = y_lo * (y_hi / y_lo) ** ((CHART_ROWS - 1 - r) / (CHART_ROWS - 1))
            label = _time(y).rjust(LABEL - 1) + "┤" if r % 3 == 0 else " " * (LABEL - 1) + "│"
            rows.append(pad([Segment(label, dim)] + [Segment(ch, st) for ch, st in grid[r]], width))
        rows.append(pad([Segment(" " * (LABEL - 1) + "└" + "─" * cols, dim)], width))
        ticks = [" "] * cols
        n = 1
        while n <= x_hi:
            c = log_position(n, 1, x_hi, cols)
            text = f"{n:,}"
            if all(t == " " for t in ticks[c : c + len(text) + 1]):
                ticks[c : c + len(text)] = list(text)
            n *= 4
        rows.append(pad([Segment(" " * LABEL + "".join(ticks)[:cols], dim)], width))
        legend = [Segment(" " * LABEL)]
        for kind in ("decode", "prefill", "mixed"):
            legend += [Segment(KIND_GLYPH[kind], kind_style[kind]), Segment(f" {kind} step  ", dim)]
        if roof is not None:
            legend += [Segment("─╱", roof_style), Segment(" roofline  ", dim)]
        legend += [
            Segment("▲", cursor),
            Segment(
                " the step at the cursor"
                + (
                    f" (step {last.step}: {plural(last.tokens, 'token')}, {_time(last.duration)})"
                    if last
                    else ""
                ),
                dim,
            ),
        ]
        rows.append(pad(legend, width))
        return rows
