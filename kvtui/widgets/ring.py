"""Sliding-window rings: W slots per (request, window group), slot = position mod W, with the write head.

The window is the current token plus the W-1 before it; writing position p overwrites slot p mod W, which held
p - W (now outside the window). The selected request's rings come first.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from kvtui.state import Ring
from kvtui.widgets.base import BOLD, DIM, HEADING, LineView, owner_style, pad

ROWS_PER_RING = 4
SLOT_STYLE = Style(color="#dddddd", bgcolor="#2f3b4f")
NEW_STYLE = Style(color="#111111", bgcolor="#e5c07b", bold=True)
HEAD_STYLE = Style(color="#e5c07b", bold=True)


MAX_RINGS = 64  # rings shown: the selected request's, then those of unfinished requests


class RingView(LineView):
    _key: tuple | None = None
    _rings: list[Ring] = []

    def rings(self) -> list[Ring]:
        """The selected request's rings first, then unfinished requests' (cached per state and selection)."""
        state = self.view.state
        if state is None:
            return []
        rid = self.view.request_id
        key = (id(state), state.index, rid)
        if key == self._key:
            return self._rings
        requests = state.requests
        mine = [r for r in state.rings.values() if r.request_id == rid]
        others = [r for r in state.rings.values() if r.request_id != rid and r.request_id in requests
                  and requests[r.request_id].status != "finished"]
        others.sort(key=lambda r: (requests[r.request_id].ordinal, r.group))
        self._rings, self._key = (sorted(mine, key=lambda r: r.group) + others)[:MAX_RINGS], key
        return self._rings

    def row_count(self, width: int) -> int:
        return 1 + max(1, len(self.rings()) * ROWS_PER_RING)

    def render_row(self, row: int, width: int) -> Strip:
        state = self.view.state
        if row == 0:
            windows = [w for w in (state.header.get("model", {}).get("windows") or [])] if state else []
            kinds = sum(1 for w in windows if w)
            return pad([Segment(f"window layers: {kinds} of {len(windows)}  · slot = position mod W · window = "
                                f"current token + W-1 before it", HEADING)], width)
        rings = self.rings()
        if not rings:
            return pad([Segment("no ring writes in this trace (the model has no sliding-window layers)", DIM)]
                       if row == 1 else [], width)
        ring = rings[(row - 1) // ROWS_PER_RING]
        part = (row - 1) % ROWS_PER_RING
        cell = max(4, len(str(max(ring.slots) if ring.slots else 0)) + 2)
        per_line = max(1, (width - 2) // cell)
        slots = ring.slots[:per_line]
        fresh = set(ring.last_written)
        if part == 0:
            req = state.requests.get(ring.request_id)
            style = owner_style(req.ordinal) + BOLD if req else BOLD
            return pad([Segment(f"{ring.request_id}", style),
                        Segment(f" group {ring.group} W={ring.window}"
                                + (f" + {ring.sinks} sink slots (positions 0-{ring.sinks - 1} kept forever)"
                                   if ring.sinks else "")
                                + f" head→slot {ring.head}"
                                f" writes {ring.writes} overwrites {ring.overwrites}"
                                + (f" (showing {per_line} of {len(ring.slots)} slots)"
                                   if per_line < len(ring.slots) else ""),
                                DIM)], width)
        if part == 1:
            segs = [Segment("  ")]
            for i in range(len(slots)):
                segs.append(Segment(("▼" if i == ring.head else "").center(cell), HEAD_STYLE))
            return pad(segs, width)
        if part == 2:
            segs = [Segment("  ")]
            for pos in slots:
                text = "·" if pos < 0 else str(pos)
                segs.append(Segment(text.center(cell - 1), NEW_STYLE if pos in fresh else SLOT_STYLE))
                segs.append(Segment(" "))
            return pad(segs, width)
        evicted = ring.last_evicted
        text = f"  last write {ring.last_written[0]}..{ring.last_written[-1]}" if ring.last_written else "  "
        if evicted:
            shown = ", ".join(map(str, evicted[-6:]))
            text += f" · fell out of the window: {'…, ' if len(evicted) > 6 else ''}{shown}"
        return pad([Segment(text, DIM)], width)
