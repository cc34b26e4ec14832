"""A request's block tables in the KV-cache groups besides its own (window_layout="paged", vLLM's hybrid
layout), under its block table: per group a line of counts and a line of its blocks.

A sliding-window group keeps only the blocks that cover the window of the next token: the blocks before it
were freed as they left the window (into the prefix cache when they were full, where they stay until evicted),
and a prefix hit did not need them. They are drawn as such, so that a window group's short table reads as
the window, not as a loss.
"""

from __future__ import annotations

from rich.segment import Segment
from textual.strip import Strip

from kvtui.widgets.base import STATE_ROLE, pad, plural

# rows a group takes: its counts, its blocks
ROWS_PER_GROUP = 2


def other_groups(state, request_id: str) -> list[int]:
    """The groups besides the table group that hold blocks of the request, in group order."""
    if not state.kv_groups:
        return []
    return [
        g
        for g in range(len(state.kv_groups))
        if g != state.table_group and request_id in state.group_tables.get(g, {})
    ]


def spans(logicals: list[int]) -> str:
    """`L0-L3, L6`: runs of logical blocks."""
    runs: list[list[int]] = []
    for logical in logicals:
        if runs and runs[-1][1] == logical - 1:
            runs[-1][1] = logical
        else:
            runs.append([logical, logical])
    return ", ".join(f"L{a}" if a == b else f"L{a}-L{b}" for a, b in runs)


def group_row(state, request_id: str, group: int, which: int, width: int, palette) -> Strip:
    """Row `which` of a group's section: 0 its counts, 1 its blocks (logical -> physical)."""
    table = state.group_tables[group][request_id]
    window = state.kv_groups[group].get("kind") == "sliding_window"
    held = [(logical, p) for logical, p in enumerate(table) if p >= 0]
    outside = [logical for logical, p in enumerate(table) if p < 0]
    dim = palette["dim"]
    if which == 0:
        segs = [
            Segment(f" {state.group_label(group)}", palette["heading"]),
            Segment(f": {plural(len(held), 'block')} held"),
        ]
        if outside:
            what = "freed by the window" if window else "not held"
            segs.append(Segment(f" · {spans(outside)} {what}", dim))
        return pad(segs, width)
    segs = [Segment(" ")]
    if outside and window:
        segs.append(Segment(f"{spans(outside)} ← window ", dim))
    for logical, p in held:
        segs += [Segment(f"L{logical}", dim), Segment(f"→P{p} ", palette[STATE_ROLE[state.block_state(p)]])]
    return pad(segs, width)
