"""Hit rates and KV memory over time, as one-line sparklines with the current value.

Hit rates (from `hit_rates` events): token = hit tokens / prompt tokens that could match; request = requests
with any hit / requests; block = block hits / block lookups; each cumulative and over the last N requests
(the windowed value is what changes now; the cumulative one hides it). Memory (from `step` events): blocks used,
cached (evictable) and free, and the byte arithmetic: formula bytes for the tokens held vs pool bytes. With a
host tier: hit tokens by the tier that served them, and the blocks and bytes moved between the tiers.
"""

from __future__ import annotations

import textwrap

from rich.segment import Segment
from textual.strip import Strip

from kvtui.state import CacheState
from kvtui.state.kv_bytes import bytes_per_token_formula
from kvtui.widgets.base import LineView, fmt_bytes, fmt_seconds, pad, plural

BARS = "▁▂▃▄▅▆▇█"
LABEL = 18
VALUE = 10


def sparkline(values: list[float], width: int, top: float | None = None) -> str:
    """`width` cells; long series are sampled with a stride (cheap: a slice), short ones left-aligned."""
    values = [v for v in values if v is not None]
    if not values or width <= 0:
        return ""
    if len(values) > width:
        stride = len(values) / width
        values = [values[int(i * stride)] for i in range(width - 1)] + [values[-1]]
    hi = top if top is not None else max(values)
    if hi <= 0:
        return BARS[0] * len(values)
    return "".join(BARS[max(0, min(7, int(v / hi * 7.999)))] for v in values)


def _series(rows: list[tuple], count: int, index: int, width: int = 400) -> list[float]:
    """Column `index` of the first `count` rows, sampled down to about `width` points (a frame needs no more).

    `rows` is the shared append-only history, so nothing is copied but the sampled points.
    """
    if count > width:
        stride = count / width
        return [rows[int(i * stride)][index] for i in range(width - 1)] + [rows[count - 1][index]]
    return [rows[i][index] for i in range(count)]


class ChartsView(LineView):
    _cache_key: tuple | None = None
    _cache: list[tuple] = []

    def lines(self, width: int) -> list[tuple]:
        """(kind, args) per row: ("head", text) | ("spark", label, values, top, value_text, role) | ("text", s);
        a heading or a text line too wide for `width` wraps at spaces onto rows of its own."""
        state = self.view.state
        if state is None:
            return [("text", "no trace yet")]
        key = (id(state), state.index, width)
        if key != self._cache_key:
            rows = []
            for row in self._build(state):
                if row[0] in ("head", "text") and len(row[1]) > width:
                    rows += [
                        (row[0], part) for part in textwrap.wrap(row[1], width, subsequent_indent="    ")
                    ]
                else:
                    rows.append(row)
            self._cache, self._cache_key = rows, key
        return self._cache

    def _build(self, state: CacheState) -> list[tuple]:
        hits, steps = state.history.hits, state.history.steps
        n_hits, n_steps = state.n_hits, state.n_steps
        out: list[tuple] = []
        n = (state.hit_rates or {}).get("window", {}).get("n")
        # no hit_rates event yet: the window's size is not known
        window = plural(n, "lookup") if isinstance(n, int) else "N lookups"
        out.append(
            (
                "head",
                f"hit rates over time ({plural(n_hits, 'sample')}; windowed = last {window}; an edit is a new "
                f"lookup, a preempted request's readmission is not)",
            )
        )
        if not n_hits:
            out.append(("text", "  no hit_rates events yet"))
        for label, i, color in (
            ("token (cum)", 1, "series-token-cum"),
            ("token (window)", 4, "series-token"),
            ("request (cum)", 2, "series-request-cum"),
            ("request (window)", 5, "series-request"),
            ("block (cum)", 3, "series-block-cum"),
            ("block (window)", 6, "series-block"),
        ):
            if n_hits:
                values = _series(hits, n_hits, i)
                last = values[-1]
                out.append(("spark", label, values, 1.0, "-" if last is None else f"{last:6.1%}", color))
        out.append(("head", f"KV memory in blocks ({state.num_blocks} total, {plural(n_steps, 'step')})"))
        top = float(state.num_blocks or 1)
        for label, i, color, now in (
            ("used", 2, "used", state.n_used),
            ("cached", 3, "cached", state.n_cached),
            ("free", 4, "free", state.n_free),
        ):
            out.append(("spark", label, _series(steps, n_steps, i), top, f"{now}", color))
        out.extend(("text", line) for line in memory_lines(state))
        if state.tier_slots:
            out.append(("head", "tiers: hit tokens by the tier that served them, blocks and bytes moved"))
            out.extend(("text", line) for line in tier_lines(state))
        out.append(("head", "engine steps"))
        last = steps[n_steps - 1] if n_steps else None
        out.append(
            (
                "spark",
                "tokens / step",
                _series(steps, n_steps, 5),
                None,
                f"{last[5]}" if last else "-",
                "series-tokens",
            )
        )
        out.append(
            (
                "spark",
                "step time",
                _series(steps, n_steps, 6),
                None,
                fmt_seconds(last[6]) if last else "-",
                "series-time",
            )
        )
        return out

    def row_count(self, width: int) -> int:
        return len(self.lines(width))

    def render_row(self, row: int, width: int) -> Strip:
        lines = self.lines(width)
        palette = self.palette()
        kind, *args = lines[row]
        if kind == "head":
            return pad([Segment(args[0], palette["heading"])], width)
        if kind == "text":
            return pad([Segment(args[0], palette["dim"])], width)
        label, values, top, value, role = args
        spark = sparkline(values, max(1, width - LABEL - VALUE - 2), top)
        return pad(
            [
                Segment(f"  {label:<{LABEL - 2}}", palette["dim"]),
                Segment(spark.ljust(width - LABEL - VALUE - 2), palette[role]),
                Segment(f" {value:>{VALUE}}", palette["bold"]),
            ],
            width,
        )


def tier_lines(state: CacheState) -> list[str]:
    """Hit tokens by tier (the hit_rates events' counts) and each lower tier's traffic."""
    total = sum(state.tier_hits.values())
    lines = [
        "  "
        + " · ".join(
            f"{tier} {plural(n, 'hit token')}" + (f" ({n / total:.0%})" if total else "")
            for tier, n in state.tier_hits.items()
        )
    ]
    for tier, moves in state.tier_moves.items():
        held, size = len(state.tier_slots[tier]), state.tier_capacity.get(tier, 0)
        lines.append(
            f"  {tier}: {held}/{size} slots held; in {plural(moves.offloaded, 'block')} "
            f"({fmt_bytes(moves.offloaded_bytes)}), loaded back {moves.loaded} ({fmt_bytes(moves.loaded_bytes)})"
            + (f", moved down {moves.demoted}" if moves.demoted else "")
            + f", dropped {moves.dropped_capacity} when full, {moves.dropped_on_device} computed again on the device"
        )
    return lines


def memory_lines(state: CacheState) -> list[str]:
    """Formula bytes (tokens held x bytes per token) next to pool bytes (blocks x bytes per block), and what
    makes them differ now: only the causes present at this moment are named."""
    bpt, bpb, bs = state.bytes_per_token, state.bytes_per_block, state.block_size
    tokens = sum(state.requests[rid].num_tokens for rid in state.tables if rid in state.requests)
    used_bytes = state.n_used * bpb
    lines = [
        f"  pool: {state.num_blocks} blocks × {fmt_bytes(bpb)} = {fmt_bytes(state.num_blocks * bpb)};"
        f" in use {fmt_bytes(used_bytes)}, cached {fmt_bytes(state.n_cached * bpb)}",
        f"  formula: {plural(tokens, 'token')} held × {fmt_bytes(bpt)}/token = {fmt_bytes(tokens * bpt)}"
        f" ({bytes_per_token_formula(state.header)})",
    ]
    if tokens:
        lines.append(
            f"  pool - formula = {fmt_bytes(used_bytes - tokens * bpt)}{_difference(state, bs, bpt)}"
        )
    return lines


def _difference(state: CacheState, bs: int, bpt: int) -> str:
    """The parts of pool - formula present now: unfilled slots of the tables' blocks, blocks counted once but
    held by several tables, tokens no block holds yet."""
    waste = shared = pending = 0
    distinct: set[int] = set()
    for rid, table in state.tables.items():
        req = state.requests.get(rid)
        if req is None:
            continue
        blocks = [p for p in table if p >= 0]
        covered = min(req.num_tokens, len(blocks) * bs)
        waste += len(blocks) * bs - covered
        pending += req.num_tokens - covered
        shared += len(blocks) - len(set(blocks) - distinct)
        distinct.update(blocks)
    parts = []
    if waste:
        parts.append(f"+{fmt_bytes(waste * bpt)} unfilled slots of held blocks")
    if shared:
        parts.append(
            f"-{fmt_bytes(shared * bs * bpt)} for {shared} block{'s' if shared > 1 else ''} shared by tables"
        )
    if pending:
        parts.append(
            f"-{fmt_bytes(pending * bpt)} for {plural(pending, 'token')} no block holds yet (queued or to recompute)"
        )
    return (": " + ", ".join(parts)) if parts else ""
