"""Sliding-window rings: W slots per (request, window group), slot = position mod W, with the write head.

The window is the current token plus the W-1 before it; writing position p overwrites slot p mod W, which held
p - W (now outside the window). An H2O cache has no write head (a new key takes the slot of one dropped): its
marker is the slot of its newest key. The selected request's rings come first.

Each slot is drawn in its role (kvtui/state/rings.py `Ring.role_of`): a sink (kept forever), recent (the
window), or a heavy hitter (H2O in a `kvtui sinks --trace` trace); a legend under the heading names the roles
present. Under each ring's slots, a map over the positions seen so far shows where in the text the held keys
lie (sinks at the start, heavy hitters scattered, the window at the end), since a wide ring shows only the slots
around its head.
"""

from __future__ import annotations

from rich.segment import Segment
from textual.strip import Strip

from kvtui.state import Ring
from kvtui.state.ring_memory import ring_memory
from kvtui.widgets.base import LineView, fit_segments, fmt_bytes, pad, plural

# a ring's title, its head marker, its slots, the map of held positions, its last write
ROWS_PER_RING = 5
# the heading, the legend, then ring memory vs full attention (a line and two bars)
HEAD_ROWS = 5
LEGEND_ROW = 1
# role -> (palette role of its cells, map glyph, legend words)
ROLE_LOOK = {
    "sink": ("sink-slot", "s", "kept forever"),
    "recent": ("slot", "r", "the window"),
    "heavy": ("heavy-slot", "h", "most attention (H2O)"),
}


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
            return fit_segments([Segment(self._heading(), palette["heading"])], width)
        if row == LEGEND_ROW:
            return self._legend_row(width)
        if row < HEAD_ROWS:
            return self._memory_row(row - 1, width)
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
            if ring.recent is not None:
                # H2O has no write head: a new key takes the slot of one dropped, so ▼ marks the newest key
                layer = f" of layer {ring.layer}, KV head 0" if ring.layer is not None else ""
                shape = (
                    f" H2O budget={ring.window}: {ring.window - ring.recent} heavy hitters"
                    f" + {ring.recent} recent{layer}"
                )
                head = f" newest→slot {ring.head}"
                counts = f" writes {ring.writes} drops {ring.overwrites}"
                around = "around it"
            else:
                shape = f" group {ring.group} W={ring.window}" + (
                    f" + {ring.sinks} sink slots (positions 0-{ring.sinks - 1} kept forever)"
                    if ring.sinks
                    else ""
                )
                head = f" head→slot {ring.head}"
                counts = f" writes {ring.writes} overwrites {ring.overwrites}"
                around = "around the head"
            return fit_segments(
                [
                    Segment(f"{ring.request_id}", style),
                    Segment(
                        shape
                        + head
                        + counts
                        + (
                            f" (slots {first}-{first + len(slots) - 1} of {len(ring.slots)}, {around})"
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
            new_style = palette["writing"]
            for pos in slots:
                text = "·" if pos < 0 else str(pos)
                role = ROLE_LOOK.get(ring.role_of(pos), ROLE_LOOK["recent"])[0]
                segs.append(Segment(text.center(cell - 1), new_style if pos in fresh else palette[role]))
                segs.append(Segment(" "))
            return pad(segs, width)
        if part == 3:
            return self._map_row(ring, width)
        return fit_segments([Segment(self._summary(ring), dim)], width)

    def _heading(self) -> str:
        state = self.view.state
        header = state.header if state else {}
        sinks = header.get("sinks") if header.get("kind") == "sinks" else None
        if sinks:
            return (
                f"kvtui sinks: caches of W = {sinks['window']} slots, S = {sinks['sink_tokens']} · "
                f"{sinks['tokens']} tokens, a sample every {sinks['every']} positions"
            )
        windows = [w for w in (header.get("model", {}).get("windows") or [])]
        kinds = sum(1 for w in windows if w)
        return (
            f"window layers: {kinds} of {len(windows)}  · slot = position mod W · window = "
            f"current token + W-1 before it"
        )

    def _legend_row(self, width: int) -> Strip:
        """What each mark means: the roles present in the rings shown, the fresh write, the head, an empty slot."""
        palette = self.palette()
        dim = palette["dim"]
        rings = self.rings()
        present = {"recent"}
        if any(r.sinks for r in rings):
            present.add("sink")
        if any(r.recent is not None for r in rings):
            present.add("heavy")
        segs = [Segment("  ")]
        for role, (style, _, words) in ROLE_LOOK.items():
            if role in present:
                segs += [Segment(f" {role} ", palette[style]), Segment(f" {words} ", dim)]
        segs += [
            Segment(" new ", palette["writing"]),
            Segment(" written ", dim),
            Segment("▼", palette["ring-head"]),
            Segment(" head · empty", dim),
        ]
        return pad(segs, width)

    def _map_row(self, ring: Ring, width: int) -> Strip:
        """The positions 0..end-1 seen so far spread over the line: each cell the role of the keys held in its
        run of positions (a sink over a heavy hitter over a recent one), `·` where none is held."""
        palette = self.palette()
        label = "  held "
        end = max(ring.end, 1)
        cells = max(1, min(end, width - len(label) - 1))
        best: dict[int, str] = {}
        rank = {"sink": 3, "heavy": 2, "recent": 1}
        for pos in ring.slots:
            if 0 <= pos < end:
                role, i = ring.role_of(pos), pos * cells // end
                if rank[role] > rank.get(best.get(i, ""), 0):
                    best[i] = role
        segs = [Segment(label, palette["dim"])]
        for i in range(cells):
            role = best.get(i)
            if role is None:
                segs.append(Segment("·", palette["free"]))
            else:
                style, glyph, _ = ROLE_LOOK[role]
                segs.append(Segment(glyph, palette[style]))
        return pad(segs, width)

    def _summary(self, ring: Ring) -> str:
        """What the ring holds by role, its last write and what left it."""
        counts: dict[str, int] = {}
        for pos in ring.slots:
            role = ring.role_of(pos)
            counts[role] = counts.get(role, 0) + 1
        held = " · ".join(f"{counts[r]} {r}" for r in ("sink", "heavy", "recent") if counts.get(r))
        text = f"  holds {held}" if held else "  "
        if ring.last_written:
            text += f" · last write {ring.last_written[0]}..{ring.last_written[-1]}"
        evicted = ring.last_evicted
        if evicted:
            shown = ", ".join(map(str, evicted[-6:]))
            left = "dropped (least attention)" if ring.recent is not None else "fell out of the window"
            text += f" · {left}: {'…, ' if len(evicted) > 6 else ''}{shown}"
        return text

    def _memory_row(self, row: int, width: int) -> Strip:
        """Row 1-3 of the memory block: ring memory vs what full attention would hold on the window layers, for the selected request (or the
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
            ratio = f"{memory.full_bytes / memory.ring_bytes:.1f}x; " if memory.ring_bytes else ""
            return fit_segments(
                [
                    Segment(f"{req.request_id} at {plural(memory.context, 'token')}, ", palette["bold"]),
                    Segment(
                        f"{memory.window_layers} window layers: rings {fmt_bytes(memory.ring_bytes)}, full "
                        f"attention would hold {fmt_bytes(memory.full_bytes)} ({ratio}saved {fmt_bytes(memory.saved)})",
                        dim,
                    ),
                ],
                width,
            )
        # the full layers' paging goes after the full-attention bar (the line above has no room for it)
        note = (
            f" · the {memory.full_layers} full layers page {fmt_bytes(memory.paged_bytes)}"
            if memory.full_layers
            else ""
        )
        # both bars on one scale
        room = max(10, width - 30 - len(note))
        note = note if row == 3 else ""
        top = max(memory.full_bytes, memory.ring_bytes) or 1
        label, value, role = (
            ("rings", memory.ring_bytes, "ring-bar")
            if row == 2
            else ("full attention", memory.full_bytes, "full-bar")
        )
        return fit_segments(
            [
                Segment(f" {label:<15}", dim),
                Segment("█" * max(1, round(room * value / top)), palette[role]),
                Segment(f" {fmt_bytes(value)}{note}", dim),
            ],
            width,
        )
