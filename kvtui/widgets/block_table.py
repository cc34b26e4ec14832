"""The block table of the selected request: logical -> physical, fill of each block, tail waste.

Once a request has finished it holds no blocks; the table then lists what the prefix tree still keeps of its
sequence (the blocks a follow-up turn or an edit would reuse), marked `cached` with their tree node.
"""

from __future__ import annotations

from rich.segment import Segment
from textual.strip import Strip

from kvtui.widgets.base import STATE_ROLE, LineView, join_texts, pad, plural, show_text

HEADER_ROWS = 2


class BlockTableView(LineView):
    _kept_key: tuple | None = None
    _kept: list[tuple[int, int]] = []

    def kept(self) -> list[tuple[int, int]]:
        """(node_id, physical) the tree keeps of a request that holds no blocks (cached per state)."""
        state, req = self.view.state, self.view.request
        if state is None or req is None or state.tables.get(req.request_id):
            return []
        key = (id(state), state.index, req.request_id)
        if key != self._kept_key:
            self._kept, self._kept_key = state.cached_path(req.token_ids), key
        return self._kept

    def row_count(self, width: int) -> int:
        state, rid = self.view.state, self.view.request_id
        if state is None or rid is None:
            return 1
        return HEADER_ROWS + max(1, len(state.tables.get(rid, ())) or len(self.kept()) + 1)

    def render_row(self, row: int, width: int) -> Strip:
        state, req = self.view.state, self.view.request
        palette = self.palette()
        dim, bold = palette["dim"], palette["bold"]
        if state is None or req is None:
            return pad([Segment("No request selected ([ and ] cycle requests).", dim)], width)
        table = state.tables.get(req.request_id, [])
        bs = state.block_size
        n = req.num_tokens
        if row == 0 and not table and req.status == "finished":
            kept = self.kept()
            return pad(
                [
                    Segment(f"{req.request_id} ", palette.owner(req.ordinal) + bold),
                    Segment(
                        f"finished · tree keeps {len(kept)}/{plural(-(-n // bs), 'block')} ({len(kept) * bs} tok)",
                        bold,
                    ),
                ],
                width,
            )
        if row == 0:
            return pad(
                [
                    Segment(f"{req.request_id} ", palette.owner(req.ordinal) + bold),
                    Segment(table_summary(table, n, bs), bold),
                ],
                width,
            )
        if row == 1:
            return pad([Segment(" logical  physical  fill   tokens", palette["heading"])], width)
        logical = row - HEADER_ROWS
        if not table:
            return self._kept_row(state, req, logical, width)
        p = table[logical]
        fill = max(0, min(bs, n - logical * bs))
        if p < 0:
            return pad([Segment(f" L{logical:<7} -", dim)], width)
        kind = state.block_state(p)
        kind_style = palette[STATE_ROLE[kind]]
        texts = req.texts[logical * bs : logical * bs + fill]
        segs = [
            Segment(f" L{logical:<7}", dim),
            Segment(f"P{p:<8}", kind_style),
            Segment(f"{fill:>2}/{bs:<3}", bold if fill < bs else dim),
        ]
        if state.ref[p] > 1:
            segs.append(Segment(f"×{state.ref[p]} ", kind_style))
        segs.append(Segment(" " + show_text(join_texts(texts))))
        return pad(segs, width)

    def _kept_row(self, state, req, logical: int, width: int) -> Strip:
        kept = self.kept()
        bs = state.block_size
        palette = self.palette()
        dim = palette["dim"]
        if logical >= len(kept):
            why = "rest: released (or not a whole block)" if req.status == "finished" else "no blocks yet"
            return pad([Segment(f" {why}", dim)], width)
        node_id, p = kept[logical]
        texts = req.texts[logical * bs : (logical + 1) * bs]
        kind = state.block_state(p)
        return pad(
            [
                Segment(f" L{logical:<7}", dim),
                Segment(f"P{p:<8}", palette[STATE_ROLE[kind]]),
                Segment(f"{bs:>2}/{bs:<3}", dim),
                Segment(f"n{node_id} ", dim),
                Segment(show_text(join_texts(texts))),
            ],
            width,
        )


def table_summary(table: list[int], tokens: int, block_size: int) -> str:
    """Blocks held, tokens, the unfilled slots of the held blocks (tail waste) and the tokens no block holds yet
    (after an edit, or queued): an edit at position 0 leaves no block and every token still to compute."""
    fills = [max(0, min(block_size, tokens - i * block_size)) for i, p in enumerate(table) if p >= 0]
    held = len(fills)
    text = f"{plural(held, 'block')} · {plural(tokens, 'token')}"
    if held:
        waste = held * block_size - sum(fills)
        text += f" · tail waste {plural(waste, 'slot')}"
    pending = tokens - sum(fills)
    if pending:
        text += f" · {pending} in no block yet (to compute)"
    return text
