"""Views render from a CacheState line by line: call render_line directly, no app."""

from __future__ import annotations

from engine.trace.metrics import percentile
from kvtui.state import replay
from kvtui.widgets.base import View
from kvtui.widgets.block_pool import BlockPoolView, block_details, pool_legend
from kvtui.widgets.block_table import BlockTableView
from kvtui.widgets.charts import ChartsView, sparkline
from kvtui.widgets.miss import explain
from kvtui.widgets.radix_tree import RadixTreeView
from kvtui.widgets.ring import RingView
from kvtui.widgets.timeline import TimelineView, latency_summary
from kvtui.widgets.token_strip import TokenStrip


def lines(widget, n=40):
    return [widget.render_line(y).text for y in range(n)]


def test_block_pool_cells_match_block_states(small_trace):
    header, events = small_trace
    state = replay(header, events[:300])
    widget = BlockPoolView(View(state))
    cols = widget.columns(80)
    first = widget.render_line(0).text
    assert first.startswith("    0 ")
    glyphs = first[6::2][:cols]
    for p, glyph in enumerate(glyphs):
        kind = state.block_state(p)
        assert (
            glyph
            in {
                "used": "■",
                "free": "·",
                "cached": "□",
                "writing": "▶",
                "shared": "23456789+",
            }[kind]
            or glyph in "×"
        ), (p, kind, glyph)
    assert widget.row_count(80) == -(-state.num_blocks // cols)
    assert "cached" in pool_legend(state).plain


def test_block_details_show_tokens_owners_and_hash(small_trace):
    header, events = small_trace
    state = replay(header, events)
    cached = next(p for p in range(state.num_blocks) if state.block_state(p) == "cached")
    text = block_details(state, cached).plain
    assert f"block P{cached}" in text and "cached" in text and state.block_hash[cached] in text
    ids, texts = state.block_tokens(cached)
    assert "".join(texts) in text.replace("\n", "")


def test_block_table_lists_logical_to_physical(small_trace):
    header, events = small_trace
    state = replay(header, events[:300])
    rid = next(r for r in state.order if state.tables.get(r))
    out = lines(BlockTableView(View(state, rid)), 10)
    assert out[0].startswith(f"{rid} ") and "tail waste" in out[0]
    assert f"P{state.tables[rid][0]}" in out[2] and out[2].lstrip().startswith("L0")


def test_radix_tree_rows_follow_depth_first_order(small_trace):
    header, events = small_trace
    state = replay(header, events)
    widget = RadixTreeView(View(state))
    rows = state.radix_rows()
    out = lines(widget, len(rows) + 1)
    assert out[0].startswith("root")
    depth, node_id = rows[0]
    assert out[1].startswith("├") and f"n{node_id} " in out[1]
    assert any(line.startswith("│ ├") for line in out[2:])


def test_timeline_lanes_and_percentiles(small_trace):
    header, events = small_trace
    state = replay(header, events)
    out = lines(TimelineView(View(state, state.order[0])), 5)
    assert out[0].startswith("request") and out[1].startswith(state.order[0])
    assert "█" in out[1] and "┃" in out[1]
    summary = latency_summary(state).plain
    assert "TTFT p50" in summary and "TPOT" in summary and "ITL" in summary
    # one definition: interpolated
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([], 50) is None


def test_ring_view_shows_slots_and_head(small_trace):
    header, events = small_trace
    state = replay(header, events[:200])
    ring = next(iter(state.rings.values()))
    out = lines(RingView(View(state, ring.request_id)), 8)
    assert "slot = position mod W" in out[0]
    # rows 1-3: ring memory vs full attention (test_ring_memory.py)
    assert "full attention would hold" in out[1]
    assert out[4].startswith(ring.request_id) and f"W={ring.window}" in out[4]
    assert "▼" in out[5]
    shown = [int(x) for x in out[6].split() if x.isdigit()]
    assert shown == [p for p in ring.slots if p >= 0]


def test_charts_and_sparkline(small_trace):
    header, events = small_trace
    state = replay(header, events)
    out = lines(ChartsView(View(state)), 20)
    assert out[0].startswith("hit rates")
    assert any("token (cum)" in line for line in out) and any("pool:" in line for line in out)
    assert sparkline([0, 0.5, 1.0], 3, 1.0) == "▁▄█"
    assert len(sparkline(list(range(1000)), 10)) == 10


def test_miss_explainer_names_the_reason(small_trace):
    header, events = small_trace
    state = replay(header, events)
    req = next(r for r in state.requests.values() if r.match and r.match["reason"] == "divergent")
    text = explain(state, req).plain
    assert f"{req.match['matched_tokens']} of {req.match['prompt_tokens']}" in text
    assert "divergent" in text and "first difference at position" in text


def test_token_strip_wraps_with_positions_and_cursor(small_trace):
    header, events = small_trace
    state = replay(header, events)
    req = next(r for r in state.requests.values() if r.edits)
    widget = TokenStrip(View(state, req.request_id))
    out = lines(widget, 6)
    assert out[0].startswith(req.request_id) and f"pos {req.num_tokens - 1}" in out[1]
    assert out[3].startswith("    0 ")
    assert "".join(req.texts).replace("\n", "⏎")[:20] in "".join(line[6:] for line in out[3:]).rstrip()
    if state.last_invalidate["request_id"] == req.request_id:
        assert "recompute" in out[2]
