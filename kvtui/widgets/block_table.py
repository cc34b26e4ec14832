"""The block table of the selected request: logical -> physical, fill of each block, tail waste.

A request that holds no blocks gets the blocks the cache keeps of its sequence instead (`kept_blocks`): a
finished one, what the prefix tree and its tail store still hold (what a follow-up turn or an edit would reuse);
a waiting or preempted one, what its admission will hit if those blocks are still there when it is scheduled.
The header, the label above those rows and the rows all count the same `KeptBlock`s.
"""

from __future__ import annotations

from rich.segment import Segment
from textual.strip import Strip

from kvtui.state import FINISHED
from kvtui.state.tree import KeptBlock
from kvtui.widgets.base import STATE_ROLE, LineView, join_texts, pad, plural, show_text
from kvtui.widgets.group_tables import ROWS_PER_GROUP, group_row, other_groups

HEADER_ROWS = 2


def kept_blocks(state, req) -> list[KeptBlock]:
    """What the cache keeps of a request's sequence: all of it for a finished request; for a waiting or
    preempted one the prefix its admission would hit, which never covers the last token (always computed)."""
    if req.status == FINISHED:
        return state.kept_blocks(req.token_ids, req.cache_salt)
    return state.kept_blocks(req.token_ids[: max(0, req.num_tokens - 1)], req.cache_salt)


def _span(first: int, last: int) -> str:
    return f"L{first}" if first == last else f"L{first}-L{last}"


class BlockTableView(LineView):
    _kept_key: tuple | None = None
    _kept: list[KeptBlock] = []

    def kept(self) -> list[KeptBlock]:
        """The blocks the cache keeps of a request that holds none (cached per state)."""
        state, req = self.view.state, self.view.request
        if state is None or req is None or state.tables.get(req.request_id):
            return []
        key = (id(state), state.index, req.request_id)
        if key != self._kept_key:
            self._kept, self._kept_key = kept_blocks(state, req), key
        return self._kept

    def row_count(self, width: int) -> int:
        state, rid = self.view.state, self.view.request_id
        if state is None or rid is None:
            return 1
        table = state.tables.get(rid)
        if table:
            return HEADER_ROWS + len(table) + ROWS_PER_GROUP * len(other_groups(state, rid))
        kept = self.kept()
        # the label above the kept rows, then the line for the rest of the sequence
        return HEADER_ROWS + (len(kept) + 1 if kept else 0) + 1

    def render_row(self, row: int, width: int) -> Strip:
        state, req = self.view.state, self.view.request
        palette = self.palette()
        dim, bold = palette["dim"], palette["bold"]
        if state is None or req is None:
            return pad([Segment("No request selected ([ and ] cycle requests).", dim)], width)
        table = state.tables.get(req.request_id, [])
        bs = state.block_size
        n = req.num_tokens
        if row == 0:
            kept = [] if table else self.kept()
            if not table and req.status == FINISHED:
                text = kept_summary(kept, n, bs)
            else:
                text = table_summary(table, n, bs, kept)
            return pad(
                [Segment(f"{req.request_id} ", palette.owner(req.ordinal) + bold), Segment(text, bold)], width
            )
        if row == 1:
            segs = [Segment(" logical  physical  fill   tokens", palette["heading"])]
            if state.kv_groups and state.table_group is not None:
                segs.append(Segment(f"   (the table of {state.group_label(state.table_group)})", dim))
            return pad(segs, width)
        logical = row - HEADER_ROWS
        if not table:
            return self._kept_row(state, req, logical, width)
        if logical >= len(table):
            index, which = divmod(logical - len(table), ROWS_PER_GROUP)
            group = other_groups(state, req.request_id)[index]
            return group_row(state, req.request_id, group, which, width, palette)
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

    def _kept_row(self, state, req, row: int, width: int) -> Strip:
        """Row 0: the label; then one row per kept block; then the rest of the sequence."""
        kept = self.kept()
        bs = state.block_size
        palette = self.palette()
        dim = palette["dim"]
        finished = req.status == FINISHED
        if not kept:
            why = "rest: released (or not a whole block)" if finished else "no blocks yet"
            return pad([Segment(f" {why}", dim)], width)
        tokens = sum(k.tokens for k in kept)
        if row == 0:
            what = "kept" if finished else "will hit"
            where = "the prefix tree" if kept[-1].node_id is not None else "the prefix tree and a tail"
            text = f" {what}: {_span(0, len(kept) - 1)}, {plural(tokens, 'token')} from {where}"
            return pad([Segment(text, palette["heading"])], width)
        logical = row - 1
        if logical >= len(kept):
            return pad([Segment(f" {_rest(kept, req.num_tokens, bs, finished)}", dim)], width)
        block = kept[logical]
        lo = logical * bs
        texts = req.texts[lo : lo + block.tokens]
        where = "tail " if block.node_id is None else f"n{block.node_id} "
        return pad(
            [
                Segment(f" L{logical:<7}", dim),
                Segment(f"P{block.physical:<8}", palette[STATE_ROLE[state.block_state(block.physical)]]),
                Segment(f"{block.tokens:>2}/{bs:<3}", dim),
                Segment(where, dim),
                Segment(show_text(join_texts(texts))),
            ],
            width,
        )


def _rest(kept: list[KeptBlock], tokens: int, block_size: int, finished: bool) -> str:
    """The line after the kept rows: the tokens no kept block holds, and the blocks they were in."""
    left = tokens - sum(k.tokens for k in kept)
    if not left:
        return "rest: none"
    last = -(-tokens // block_size) - 1
    if finished:
        released = f", {_span(len(kept), last)} released" if last >= len(kept) else ""
        return f"rest: {plural(left, 'token')} in no kept block{released}"
    return f"rest: {plural(left, 'token')} to compute, no blocks yet"


def kept_summary(kept: list[KeptBlock], tokens: int, block_size: int) -> str:
    """A finished request's header: how many of its blocks (and tokens) the cache still keeps."""
    blocks = -(-tokens // block_size)
    held = sum(k.tokens for k in kept)
    return f"finished · tree keeps {len(kept)}/{plural(blocks, 'block')} ({held} tok)"


def table_summary(table: list[int], tokens: int, block_size: int, will_hit: list[KeptBlock] = ()) -> str:
    """Blocks held, tokens, the unfilled slots of the held blocks (tail waste) and the tokens no block holds yet
    (after an edit, or queued): an edit at position 0 leaves no block and every token still to compute. A request
    holding no block counts the blocks its admission `will_hit` apart from those it will compute."""
    fills = [max(0, min(block_size, tokens - i * block_size)) for i, p in enumerate(table) if p >= 0]
    held = len(fills)
    hit = sum(k.tokens for k in will_hit)
    if hit and not held:
        # short: the table is half a screen wide
        return f"{plural(tokens, 'token')}: will hit {hit} ({plural(len(will_hit), 'block')}), {tokens - hit} to compute"
    text = f"{plural(held, 'block')} · {plural(tokens, 'token')}"
    if held:
        waste = held * block_size - sum(fills)
        text += f" · tail waste {plural(waste, 'slot')}"
    pending = tokens - sum(fills)
    if pending:
        text += f" · {pending} in no block yet (to compute)"
    return text
