"""The attention mask of each request's chunk in the step at the cursor, per layer kind (full, window W).

Rows are the query positions computed this step, columns the key positions 0..end-1 (a cell covers several
when they do not fit). Colour roles (kvtui/widgets/palette.py): `cached` the cached prefix (K/V already in the
cache, fully visible); `prefill` the chunk itself (lower-triangular); `sink` attention-sink columns; an
`evicted` dot: a key the window has dropped (outside q-W < k <= q); blank: the future (k > q). Shades ▓▒░
mark a cell only partly visible.

A `kvtui sinks --trace` trace draws each request with its own cache's rule (kvtui/state/masks.py,
`request_rules`): `window` a window of W, `sinks` S sinks + W - S recent, `heavy-hitters` the positions its
`ring_kept` records, the heavy hitters in the sink colour.
"""

from __future__ import annotations

import math

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from kvtui.state.masks import (
    CACHED,
    CHUNK,
    HEAVY,
    MASKED,
    SINK,
    KeptSet,
    LayerKind,
    StepMasks,
    cell,
    request_rules,
    step_masks,
)
from kvtui.widgets.base import BuiltLinesView, pad
from kvtui.widgets.palette import theme_palette

MAX_QUERY_ROWS = 12
# query label cells
LEFT = 10
REGION_ROLE = {CACHED: "cached", CHUNK: "prefill", SINK: "sink", HEAVY: "sink", MASKED: "evicted"}
# the regions' looks in the default theme (what a view draws before it is mounted)
REGION_STYLE = {region: theme_palette()[role] for region, role in REGION_ROLE.items()}


def _glyph(frac: float) -> str:
    return "█" if frac >= 0.999 else "▓" if frac >= 0.6 else "▒" if frac >= 0.3 else "░"


def _layers(layers: tuple[int, ...]) -> str:
    shown = ", ".join(map(str, layers[:8]))
    return f"layer{'s' if len(layers) > 1 else ''} {shown}{', …' if len(layers) > 8 else ''}"


class MaskView(BuiltLinesView):
    """Reads the event list it is given (`events`) backwards from the state's cursor to the step's chunks."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.events: list[dict] = []
        self._key: tuple | None = None
        self._rows: list[Strip] = []

    def _lines(self, width: int) -> list[Strip]:
        state = self.view.state
        cursor = state.index if state is not None else 0
        key = (id(self.events), cursor, width, self.view.request_id, self.palette())
        if key != self._key:
            header = state.header if state is not None else {}
            self._rows, self._key = self._build(header, step_masks(self.events, cursor), width), key
        return self._rows

    def _build(self, header: dict, masks: StepMasks, width: int) -> list[Strip]:
        state = self.view.state
        palette = self.palette()
        dim, heading = palette["dim"], palette["heading"]
        region = {kind: palette[role] for kind, role in REGION_ROLE.items()}
        sinks_trace = header.get("kind") == "sinks"
        out = [
            pad(
                [
                    Segment("attention masks", heading),
                    Segment(f" of engine step {masks.step}" if masks.step is not None else "", heading),
                    Segment(" · rows: query positions computed this step · columns: key positions", dim),
                ],
                width,
            )
        ]
        legend = [
            Segment("█ ", region[CACHED]),
            Segment("cached prefix (fully visible)  ", dim),
            Segment("█ ", region[CHUNK]),
            Segment("this chunk (causal)  ", dim),
            Segment("█ ", region[SINK]),
            Segment("sink / heavy hitter  " if sinks_trace else "sink  ", dim),
            Segment("· ", region[MASKED]),
            Segment("outside the window  ", dim),
            Segment("▓▒░ partly  blank: future (k > q)", dim),
        ]
        out.append(pad(legend, width))
        if not masks.chunks:
            out.append(pad([Segment("no engine step at the cursor yet (step forward with > )", dim)], width))
            return out
        selected = self.view.request_id
        # the selected request first
        chunks = sorted(masks.chunks, key=lambda c: c.request_id != selected)
        for chunk in chunks:
            req = state.requests.get(chunk.request_id) if state is not None else None
            style = (palette.owner(req.ordinal) if req is not None else Style()) + palette["bold"]
            what = (
                f"prefill {chunk.start}..{chunk.end - 1} ({chunk.queries} queries)"
                if chunk.kind == "prefill"
                else f"decode position {chunk.start}"
            )
            before = (
                f" · {chunk.start} cached before this step (prefix hit or earlier chunks)"
                if chunk.start
                else " · nothing cached before it"
            )
            out.append(Strip.blank(width))
            out.append(
                pad(
                    [
                        Segment(chunk.request_id, style),
                        Segment(f" {what} · keys 0..{chunk.end - 1}{before}", dim),
                    ],
                    width,
                )
            )
            kinds = request_rules(header, masks, chunk.request_id)
            if not kinds:
                note = "  its cache's ring_write / ring_kept comes later in this step (not applied yet)"
                out.append(pad([Segment(note, dim)], width))
            for kind in kinds:
                out += self._matrix(chunk, kind, masks, width)
        return out

    def _matrix(self, chunk, kind: LayerKind | KeptSet, masks: StepMasks, width: int) -> list[Strip]:
        palette = self.palette()
        dim = palette["dim"]
        region_style = {region: palette[role] for region, role in REGION_ROLE.items()}
        if isinstance(kind, KeptSet):
            rows = self._kept_heading(chunk, kind, width)
        else:
            rows = self._window_heading(chunk, kind, masks, width)
        cols = max(4, width - LEFT - 1)
        keys_per_col = max(1, math.ceil(chunk.end / cols))
        ncols = math.ceil(chunk.end / keys_per_col)
        q_per_row = max(1, math.ceil(chunk.queries / MAX_QUERY_ROWS))
        axis = [" "] * ncols
        for pos, label in ((0, "0"), (chunk.start, f"▏{chunk.start}"), (chunk.end - 1, str(chunk.end - 1))):
            c = max(0, min(pos // keys_per_col, ncols - len(label)))
            if len(label) <= ncols and all(a == " " for a in axis[c : c + len(label)]):
                axis[c : c + len(label)] = list(label)[: ncols - c]
        if keys_per_col > 1 or q_per_row > 1:
            rows.append(
                pad(
                    [
                        Segment(
                            f"  1 column = {keys_per_col} key{'s' if keys_per_col > 1 else ''}, 1 row = "
                            f"{q_per_row} quer{'ies' if q_per_row > 1 else 'y'}",
                            dim,
                        )
                    ],
                    width,
                )
            )
        rows.append(pad([Segment("keys".rjust(LEFT - 1) + " ", dim), Segment("".join(axis), dim)], width))
        for q0 in range(chunk.start, chunk.end, q_per_row):
            q1 = min(chunk.end, q0 + q_per_row)
            label = f"q {q0}" if q1 - q0 == 1 else f"q {q0}-{q1 - 1}"
            segs = [Segment(label.rjust(LEFT - 1)[: LEFT - 1] + " ", dim)]
            for c in range(ncols):
                k0 = c * keys_per_col
                k1 = min(chunk.end, k0 + keys_per_col)
                frac, counts = cell(kind, chunk.start, q0, q1, k0, k1)
                if frac > 0:
                    region = next(r for r in (SINK, HEAVY, CHUNK, CACHED) if counts.get(r))
                    segs.append(Segment(_glyph(frac), region_style[region]))
                elif counts[MASKED]:
                    segs.append(Segment("·", region_style[MASKED]))
                else:
                    segs.append(Segment(" "))
            rows.append(pad(segs, width))
        return rows

    def _window_heading(self, chunk, kind: LayerKind, masks: StepMasks, width: int) -> list[Strip]:
        """A layer kind's heading: its layers and rule, and the chunk's ring write in its window layers."""
        if kind.window is None:
            rule = "the cached prefix fully visible, the chunk lower-triangular"
        else:
            rule = f"each query sees itself + the {kind.window - 1} keys before it"
            if kind.sinks:
                rule += f", and sink positions 0-{kind.sinks - 1} always"
        palette = self.palette()
        dim = palette["dim"]
        rows = [
            pad(
                [
                    Segment(f"  {kind.label}", palette["bold"]),
                    Segment(f" · {_layers(kind.layers)} · {rule}", dim),
                ],
                width,
            )
        ]
        if kind.window is not None:
            ring = next(
                (
                    ev
                    for (rid, _), ev in masks.ring_writes.items()
                    if rid == chunk.request_id and ev["window"] == kind.window
                ),
                None,
            )
            if ring is not None:
                evicted = ring["evicted"]
                dropped = (
                    f", overwrote {evicted[0]}..{evicted[-1]} ({len(evicted)} fell out of the window)"
                    if evicted
                    else ", nothing overwritten"
                )
                rows.append(
                    pad(
                        [
                            Segment(
                                f"  ring: wrote positions {ring['start']}..{ring['end'] - 1} into "
                                f"{kind.window} slots (slot = position mod W){dropped}",
                                dim,
                            )
                        ],
                        width,
                    )
                )
        return rows

    def _kept_heading(self, chunk, kind: KeptSet, width: int) -> list[Strip]:
        """A heavy-hitter cache's heading: its layer and KV head, the recorded set, and what it leaves out."""
        palette = self.palette()
        dim = palette["dim"]
        where = f"layer {kind.layer}, KV head {kind.kv_head}" if kind.layer is not None else "one KV head"
        rule = f"each query sees its {kind.recent} newest keys and the heavy hitters held below them"
        last = kind.end - 1
        heavy = sum(1 for p in kind.kept if p <= last - kind.recent)
        rows = [
            pad([Segment(f"  {kind.label}", palette["bold"]), Segment(f" · {where} · {rule}", dim)], width),
            pad(
                [
                    Segment(
                        f"  ring_kept: the {len(kind.kept)} positions held as q {last} read them "
                        f"({heavy} heavy hitters + {len(kind.kept) - heavy} recent); each layer and KV head "
                        "keeps its own",
                        dim,
                    )
                ],
                width,
            ),
        ]
        unshown = {q: n for q in range(chunk.start, min(chunk.end, kind.end)) if (n := kind.unshown(q))}
        if unshown:
            first, most = min(unshown), max(unshown.values())
            many = f"{most} more key{'s' if most > 1 else ''} held"
            held = (
                f"q {first}: {many}" if len(unshown) == 1 else f"q {first}-{max(unshown)}: up to {many} a row"
            )
            note = f"  {held}, dropped before q {last} (not recorded: only the last query's set is)"
            rows.append(pad([Segment(note, dim)], width))
        return rows
