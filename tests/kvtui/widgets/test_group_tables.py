"""The KV-cache groups in the pool tab (window_layout="paged"): each block's group, the groups' counts, and a
request's blocks in each window group, from a real engine trace (tests/kvtui/data/paged_tiny.jsonl)."""

from __future__ import annotations

from pathlib import Path

from engine.trace import read_trace
from kvtui.state.cache_state import CacheState
from kvtui.widgets.block_pool import block_details, group_legend
from kvtui.widgets.group_tables import other_groups, spans

TRACE = Path(__file__).resolve().parents[1] / "data" / "paged_tiny.jsonl"


def _states():
    parsed = read_trace(TRACE, strict=True)
    state = CacheState(parsed.header)
    for event in parsed.events:
        state.apply(event)
        yield state


def test_spans_join_runs():
    assert spans([0, 1, 2, 5, 7, 8]) == "L0-L2, L5, L7-L8"


def test_every_held_block_is_in_the_group_whose_table_holds_it_and_the_counts_add_up():
    seen_freed = False
    for state in _states():
        tables = {state.table_group: state.tables, **state.group_tables}
        for group, by_request in tables.items():
            for table in by_request.values():
                assert all(state.block_group[p] == group for p in table if p >= 0)
        counts = state.group_counts()
        assert sum(held + cached for _, held, cached in counts) == state.num_blocks - state.n_free
        for rid in state.tables:
            for group in other_groups(state, rid):
                table = state.group_tables[group][rid]
                # a window group's table: the blocks before the window freed, the window's held
                seen_freed |= bool(table) and table[0] < 0 and max(table) >= 0
    assert seen_freed


def test_the_legend_and_the_details_name_the_groups():
    state = next(s for s in _states() if s.index == 60)
    legend = str(group_legend(state))
    assert "g0 w8" in legend and "g1 w8" in legend and "g2 full" in legend
    window_block = next(
        p for p, g in enumerate(state.block_group) if g == 0 and state.block_state(p) != "free"
    )
    assert "group g0 window 8" in str(block_details(state, window_block))
