"""Sliding-window rings: W slots per (request, window group), slot = position mod W, with the write head.

The window is the current token plus the W-1 before it; writing position p overwrites slot p mod W, which held
p - W (now outside the window). The selected request's rings come first.
"""

from __future__ import annotations

from rich.segment import Segment
from textual.strip import Strip

from kvtui.state import Ring
from kvtui.state.ring_memory import ring_memory
from kvtui.widgets.base import LineView, fmt_bytes, pad, plural

ROWS_PER_RING = 4
# the heading, then ring memory vs full attention (a line and two bars)
HEAD_ROWS = 4


# rings shown: the selected request's, then those of unfinished requests
MAX_RINGS = 64


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
        others = [
            r
            for r in state.rings.values()
            if r.request_id != rid
            and r.request_id in requests
            and requests[r.request_id].status != "finished"
        ]
        others.sort(key=lambda r: (requests[r.request_id].ordinal, r.group))
        self._rings, self._key = (sorted(mine, key=lambda r: r.group) + others)[:MAX_RINGS], key
        return self._rings

    def row_count(self, width: int) -> int:
        return HEAD_ROWS + max(1, len(self.rings()) * ROWS_PER_RING)

    def render_row(self, row: int, width: int) -> Strip:
        state = self.view.state
        palette = self.palette()
        dim, bold = palette["dim"], palette["bold"]
        if row == 0:
            windows = [w for w in (state.header.get("model", {}).get("windows") or [])] if state else []
            kinds = sum(1 for w in windows if w)
            return pad(
                [
                    Segment(
                        f"window layers: {kinds} of {len(windows)}  · slot = position mod W · window = "
                        f"current token + W-1 before it",
                        palette["heading"],
                    )
                ],
                width,
            )
        if row < HEAD_ROWS:
            return self._memory_row(row, width)
        rings = self.rings()
        if not rings:
            return pad(
                [Segment("no ring writes in this trace (the model has no sliding-window layers)", dim)]
                if row == HEAD_ROWS
                else [],
                width,
            )
        ring = rings[(row - HEAD_ROWS) // ROWS_PER_RING]
        part = (row - HEAD_ROWS) % ROWS_PER_RING
        cell = max(4, len(str(max(ring.slots) if ring.slots else 0)) + 2)
        per_line = max(1, (width - 2) // cell)
        # a ring wider than the screen shows the slots around its write head
        first = max(0, min(len(ring.slots) - per_line, ring.head - per_line // 2))
        slots = ring.slots[first : first + per_line]
        fresh = set(ring.last_written)
        if part == 0:
            req = state.requests.get(ring.request_id)
            style = palette.owner(req.ordinal) + bold if req else bold
            return pad(
                [
                    Segment(f"{ring.request_id}", style),
                    Segment(
                        f" group {ring.group} W={ring.window}"
                        + (
                            f" + {ring.sinks} sink slots (positions 0-{ring.sinks - 1} kept forever)"
                            if ring.sinks
                            else ""
                        )
                        + f" head→slot {ring.head}"
                        f" writes {ring.writes} overwrites {ring.overwrites}"
                        + (
                            f" (slots {first}-{first + len(slots) - 1} of {len(ring.slots)}, around the head)"
                            if per_line < len(ring.slots)
                            else ""
                        ),
                        dim,
                    ),
                ],
                width,
            )
        if part == 1:
            segs = [Segment("  ")]
            for i in range(len(slots)):
                segs.append(
                    Segment(("▼" if first + i == ring.head else "").center(cell), palette["ring-head"])
                )
            return pad(segs, width)
        if part == 2:
            segs = [Segment("  ")]
            new_style, slot_style = palette["writing"], palette["slot"]
            for pos in slots:
                text = "·" if pos < 0 else str(pos)
                segs.append(Segment(text.center(cell - 1), new_style if pos in fresh else slot_style))
                segs.append(Segment(" "))
            return pad(segs, width)
        evicted = ring.last_evicted
        text = f"  last write {ring.last_written[0]}..{ring.last_written[-1]}" if ring.last_written else "  "
        if evicted:
            shown = ", ".join(map(str, evicted[-6:]))
            text += f" · fell out of the window: {'…, ' if len(evicted) > 6 else ''}{shown}"
        return pad([Segment(text, dim)], width)

    def _memory_row(self, row: int, width: int) -> Strip:
        """Ring memory vs what full attention would hold on the window layers, for the selected request (or the
        first one with rings): equal up to W tokens, then the ring stays flat while full attention grows."""
        state = self.view.state
        palette = self.palette()
        dim = palette["dim"]
        rings = self.rings()
        req = self.view.request or (state.requests.get(rings[0].request_id) if rings else None)
        # positions computed: what the request reports, or what its rings have seen (whichever is further)
        seen = [max(r.slots) + 1 for r in rings if req is not None and r.request_id == req.request_id]
        memory = ring_memory(state.header, max([req.num_computed, *seen])) if req is not None else None
        if memory is None or not memory.context:
            return pad([], width)
        if row == 1:
            ratio = f" ({memory.full_bytes / memory.ring_bytes:.1f}x)" if memory.ring_bytes else ""
            return pad(
                [
                    Segment(f"{req.request_id} at {plural(memory.context, 'token')}: ", palette["bold"]),
                    Segment(
                        f"full attention would hold {fmt_bytes(memory.full_bytes)}{ratio} on the "
                        f"{memory.window_layers} window layers, rings {fmt_bytes(memory.ring_bytes)} "
                        f"(saved {fmt_bytes(memory.saved)}; the {memory.full_layers} full layers page "
                        f"{fmt_bytes(memory.paged_bytes)})",
                        dim,
                    ),
                ],
                width,
            )
        room = max(10, width - 30)
        top = max(memory.full_bytes, memory.ring_bytes) or 1
        label, value, role = (
            ("rings", memory.ring_bytes, "ring-bar")
            if row == 2
            else ("full attention", memory.full_bytes, "full-bar")
        )
        return pad(
            [
                Segment(f" {label:<15}", dim),
                Segment("█" * max(1, round(room * value / top)), palette[role]),
                Segment(f" {fmt_bytes(value)}", dim),
            ],
            width,
        )
