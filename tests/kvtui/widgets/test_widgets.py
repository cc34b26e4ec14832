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
    out = lines(RingView(View(state, ring.request_id)), 10)
    assert "slot = position mod W" in out[0]
    # row 1: the legend of the slots' roles; rows 2-4: ring memory vs full attention (test_ring_memory.py)
    assert "recent" in out[1] and "▼ head" in out[1] and "heavy" not in out[1]
    assert "full attention would hold" in out[2]
    assert out[5].startswith(ring.request_id) and f"W={ring.window}" in out[5]
    assert "▼" in out[6]
    shown = [int(x) for x in out[7].split() if x.isdigit()]
    assert shown == [p for p in ring.slots if p >= 0]
    # the held positions' map, then what the ring holds by role
    assert out[8].startswith("  held ") and "r" in out[8] and "holds" in out[9]


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


def test_a_ring_wider_than_the_screen_shows_the_slots_around_its_write_head(small_trace):
    header, events = small_trace
    state = replay(header, events[:200])
    ring = next(iter(state.rings.values()))
    # a 512-slot ring whose head is far past what one line holds
    ring.window, ring.slots, ring.head = 512, list(range(512)), 133
    widget = RingView(View(state, ring.request_id))
    widget.DEFAULT_WIDTH = 120
    out = lines(widget, 8)
    assert "around the head" in out[5] and "head→slot 133" in out[5]
    marker = out[6].index("▼")
    shown = out[7].split()
    assert "133" in shown
    # the arrow stands over slot 133
    column = out[7].index(" 133 ") + 1
    assert abs(marker - column) <= 2, (out[6], out[7])


def _lane(marks, now, finished=None, cols=20):
    from kvtui.state import RequestRecord
    from kvtui.widgets.timeline import lane_cells

    req = RequestRecord("r0", 0, 4, [1, 2, 3, 4], ["a", "b", "c", "d"], arrived=marks[0][0], marks=marks)
    req.finished = finished
    return "".join(glyph for glyph, _ in lane_cells(req, 20.0, cols, now))


def test_a_lane_draws_a_running_prefill_as_running_whatever_the_trace():
    # scheduled at 2, its long prefill chunk lands at 12: running in between, never "queued"
    lane = _lane([(0.0, "arrived", 0), (2.0, "scheduled", 1), (12.0, "prefill", 1)], now=14.0)
    assert lane[:2] == "··" and set(lane[3:12]) == {"─"}, lane
    # the cursor inside that prefill: the same
    lane = _lane([(0.0, "arrived", 0), (2.0, "scheduled", 1)], now=10.0)
    assert set(lane[3:11]) == {"─"}, lane


def test_a_lane_after_an_edit_of_a_finished_request_is_queued_then_running_again():
    marks = [
        (0.0, "arrived", 0),
        (1.0, "scheduled", 1),
        (2.0, "prefill", 1),
        (4.0, "finished", 2),
        (8.0, "edit", 3),
        (12.0, "scheduled", 4),
        (13.0, "prefill", 4),
    ]
    lane = _lane(marks, now=16.0, finished=4.0)
    # ran, finished, idle, queued after the edit, running again
    assert lane[3] == "─" and lane[4] == "┃" and lane[5:8].strip() == "" and lane[9:12] == "···", lane
    assert lane[14:17] == "───", lane


def test_an_aborted_request_reads_aborted_and_a_finished_one_says_why():
    from kvtui.state import RequestRecord
    from kvtui.widgets.timeline import request_summary

    req = RequestRecord("r3", 0, 4, [1, 2, 3, 4], ["a", "b", "c", "d"], status="finished", reason="aborted")
    text = request_summary(req).plain
    assert text.startswith("r3 aborted") and "finished" not in text
    req.reason = "eos"
    assert request_summary(req).plain.startswith("r3 finished (eos)")


def test_the_memory_note_names_only_the_causes_present_at_that_moment():
    from pathlib import Path

    from engine.trace import read_trace
    from kvtui.widgets.charts import memory_lines

    trace = read_trace(str(Path(__file__).parents[1] / "data" / "edit_series.jsonl"))
    events = trace.events
    checked = 0
    for k, event in enumerate(events):
        if event["type"] not in ("invalidate", "edit", "step"):
            continue
        state = replay(trace.header, events[: k + 1])
        note = memory_lines(state)[-1]
        if not note.startswith("  pool - formula"):
            continue
        held = [p for table in state.tables.values() for p in table if p >= 0]
        assert ("shared by tables" in note) == (len(held) != len(set(held))), (k, note)
        waiting = any(
            state.requests[rid].num_tokens > len(table) * state.block_size
            for rid, table in state.tables.items()
            if rid in state.requests
        )
        assert ("no block holds yet" in note) == waiting, (k, note)
        checked += 1
    assert checked > 5


def test_the_tree_says_what_its_sibling_notation_means_when_it_uses_it(small_trace):
    header, events = small_trace
    state = replay(header, events)
    widget = RadixTreeView(View(state, None))
    widget.DEFAULT_WIDTH = 400
    out = lines(widget, 60)
    assert any("…" in line and "=" in line for line in out[1:])
    assert "…N=: the first N tokens equal its first sibling's" in out[0]
