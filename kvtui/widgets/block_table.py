"""The block table of the selected request: logical -> physical, fill of each block, tail waste."""

from __future__ import annotations

from rich.segment import Segment
from textual.strip import Strip

from kvtui.widgets.base import BOLD, DIM, HEADING, STATE_STYLE, LineView, owner_style, pad, show_text

HEADER_ROWS = 2


class BlockTableView(LineView):
    def row_count(self, width: int) -> int:
        state, rid = self.view.state, self.view.request_id
        if state is None or rid is None:
            return 1
        return HEADER_ROWS + max(1, len(state.tables.get(rid, ())))

    def render_row(self, row: int, width: int) -> Strip:
        state, req = self.view.state, self.view.request
        if state is None or req is None:
            return pad([Segment("No request selected ([ and ] cycle requests).", DIM)], width)
        table = state.tables.get(req.request_id, [])
        bs = state.block_size
        n = req.num_tokens
        if row == 0:
            blocks = -(-n // bs) if n else 0
            waste = blocks * bs - n
            return pad([Segment(f"{req.request_id} ", owner_style(req.ordinal) + BOLD),
                        Segment(f"{len(table)} blocks · {n} tokens · tail waste {waste} slot{'s' * (waste != 1)}",
                                BOLD)], width)
        if row == 1:
            return pad([Segment(" logical  physical  fill   tokens", HEADING)], width)
        logical = row - HEADER_ROWS
        if not table:
            why = "finished: blocks released (cached ones stay in the tree)" if req.status == "finished" else \
                "no blocks yet"
            return pad([Segment(f" {why}", DIM)], width)
        p = table[logical]
        fill = max(0, min(bs, n - logical * bs))
        if p < 0:
            return pad([Segment(f" L{logical:<7} -", DIM)], width)
        kind = state.block_state(p)
        texts = req.texts[logical * bs:logical * bs + fill]
        segs = [Segment(f" L{logical:<7}", DIM), Segment(f"P{p:<8}", STATE_STYLE[kind]),
                Segment(f"{fill:>2}/{bs:<3}", BOLD if fill < bs else DIM)]
        if state.ref[p] > 1:
            segs.append(Segment(f"×{state.ref[p]} ", STATE_STYLE[kind]))
        segs.append(Segment(" " + "".join(show_text(t) for t in texts)))
        return pad(segs, width)
