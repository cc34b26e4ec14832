"""kvtui/state/masks.py and kvtui/widgets/mask.py: the attention masks of a step, on a real tiny hybrid-model trace."""

from __future__ import annotations

import itertools

import pytest
from tiny_trace import hybrid_trace

from kvtui.app import KvtuiApp
from kvtui.screens.panel import PanelScreen
from kvtui.state import replay
from kvtui.state.masks import CACHED, CHUNK, FUTURE, MASKED, SINK, LayerKind, cell, layer_kinds, step_masks
from kvtui.state.timeline import Timeline
from kvtui.widgets.base import View
from kvtui.widgets.mask import REGION_STYLE, MaskView


def step_end(events, step: int) -> int:
    """The cursor just after step `step`'s step event."""
    return next(i + 1 for i, ev in enumerate(events) if ev["type"] == "step" and ev["step"] == step)


def mask_lines(header, events, cursor, width=100, request_id=None) -> list[str]:
    view = MaskView()
    view.events = list(events)
    state = replay(header, list(events[:cursor]))
    view.view = View(state, request_id=request_id)
    return [view.render_row(y, width).text.rstrip() for y in range(view.row_count(width))]


def test_cell_counts_match_pair_by_pair():
    kinds = [LayerKind(None, 0, (0,)), LayerKind(4, 0, (1,)), LayerKind(4, 2, (2,)), LayerKind(1, 1, (3,))]
    for q0, q1, k0, k1, start in itertools.product(range(9), range(1, 12), range(10), range(1, 12), range(6)):
        if q1 <= q0 or k1 <= k0:
            continue
        for kind in kinds:
            frac, counts = cell(kind, start, q0, q1, k0, k1)
            brute = dict.fromkeys((CACHED, CHUNK, SINK, MASKED, FUTURE), 0)
            for q in range(q0, q1):
                for k in range(k0, k1):
                    brute[kind.region(q, k, start)] += 1
            assert counts == brute
            assert frac == pytest.approx(
                (brute[CACHED] + brute[CHUNK] + brute[SINK]) / ((q1 - q0) * (k1 - k0))
            )


def test_layer_kinds_from_the_header():
    header, _ = hybrid_trace()
    assert layer_kinds(header) == [LayerKind(None, 0, (1,)), LayerKind(8, 0, (0, 2))]
    sinks = {"model": {"windows": [32, 32], "sink_tokens": 4}}
    assert layer_kinds(sinks) == [LayerKind(32, 4, (0, 1))]


def test_step_masks_are_the_steps_chunks():
    header, events = hybrid_trace()
    for step in range(8):
        cursor = step_end(events, step)
        masks = step_masks(list(events), cursor)
        expected = [
            ev for ev in events[:cursor] if ev["type"] in ("prefill_chunk", "decode") and ev["step"] == step
        ]
        assert masks.step == step
        assert [(c.request_id, c.start) for c in masks.chunks] == [
            (ev["request_id"], ev.get("start", ev.get("position"))) for ev in expected
        ]
        prev = step_end(events, step - 1) if step else 0
        ids = {ev["request_id"] for ev in expected}
        writes = {
            (ev["request_id"], ev["group"])
            for ev in events[prev:cursor]
            if ev["type"] == "ring_write" and ev["request_id"] in ids
        }
        assert writes and set(masks.ring_writes) == writes


def test_a_prefill_after_a_prefix_hit_and_a_fresh_prefill():
    header, events = hybrid_trace()
    lines = mask_lines(header, events, step_end(events, 6))
    text = "\n".join(lines)
    assert "attention masks of engine step 6" in lines[0]
    # r1 continues a cached prefix of 16 tokens: every query row sees all 16 (full layer) then its triangle
    assert "r1 prefill 16..22 (6 queries) · keys 0..21 · 16 cached before this step" in text
    full = lines.index(
        "  full attention · layer 1 · the cached prefix fully visible, the chunk lower-triangular"
    )
    rows = lines[full + 2 : full + 8]
    assert rows == [f"     q {q} " + "█" * (q + 1) for q in range(16, 22)]
    window = lines.index("  sliding window W=8 · layers 0, 2 · each query sees itself + the 7 keys before it")
    assert lines[window + 1].startswith("  ring: wrote positions 16..21 into 8 slots")
    rows = lines[window + 3 : window + 9]
    assert rows == [f"     q {q} " + "·" * (q - 7) + "█" * 8 for q in range(16, 22)]
    # r2 starts from nothing: 18 queries in 9 rows of 2, the diagonal cells half visible
    assert "r2 prefill 0..18 (18 queries) · keys 0..17 · nothing cached before it" in text
    assert "    q 0-1 █▒" in lines and "  q 16-17 █████████████████▒" in lines


def test_a_decode_step_is_one_row_and_the_window_drops_the_old_keys():
    header, events = hybrid_trace()
    lines = mask_lines(header, events, step_end(events, 11))
    assert "     q 26 " + "█" * 27 in lines
    assert "     q 26 " + "·" * 19 + "█" * 8 in lines


def test_wide_prompts_bin_keys_into_columns():
    header, events = hybrid_trace()
    lines = mask_lines(header, events, step_end(events, 6), width=30)
    # r2's 18 keys in 19 columns fit; r1's 22 keys do not: 2 keys per column, its 6 queries one per row
    assert "  1 column = 2 keys, 1 row = 1" in lines
    full = lines.index("  1 column = 2 keys, 1 row = 1") + 1
    # keys 0..15 whole, then half of (16, 17)
    assert lines[full + 1] == "     q 16 " + "█" * 8 + "▒"
    assert all(len(line) <= 30 for line in lines)


@pytest.mark.anyio
async def test_k_opens_the_mask_panel_and_follows_the_cursor():
    header, events = hybrid_trace()
    app = KvtuiApp(Timeline(header, list(events)), source="hybrid", clock=lambda: 0.0, frame_rate=None)
    async with app.run_test(size=(100, 40)) as pilot:
        app.seek(step_end(events, 6))
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, PanelScreen) and app.screen.kind == "mask"
        body = app.screen.body
        assert "step 6" in body.render_line(0).text
        await pilot.press("greater_than_sign")
        await pilot.pause()
        assert "step 7" in body.render_line(0).text
        # the roofline panel replaces it
        await pilot.press("l")
        await pilot.pause()
        assert isinstance(app.screen, PanelScreen) and app.screen.kind == "roofline"
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, PanelScreen)
        assert "step 7" in str(app.query_one("#status").render())


def test_gemma3_fixture_past_its_window():
    """The recorded Gemma 3 270M trace (15 window layers W=512, 3 full): the chunk 512..622 after two chunks of
    256 sees the whole prefix in the full layers, and only the last 512 keys in the window layers."""
    from pathlib import Path

    from kvtui.app.loader import load_trace

    trace = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "gemma3_hybrid_window.jsonl"
    loaded = load_trace(str(trace))
    lines = mask_lines(loaded.header, loaded.events, step_end(loaded.events, 2))
    assert "story prefill 512..622 (110 queries) · keys 0..621 · 512 cached before this step" in lines[3]
    assert lines[4].startswith("  full attention · layers 5, 11, 17 ·")
    window = next(
        i for i, line in enumerate(lines) if line.startswith("  sliding window W=512 · layers 0, 1,")
    )
    assert lines[window + 1].startswith("  ring: wrote positions 512..621 into 512 slots")
    # (the line is cut at 100 cells)
    assert "overwrote 0..109 (110 fell" in lines[window + 1]
    full_rows = lines[7:window]
    window_rows = lines[window + 4 :]
    # 110 queries, 10 per row
    assert len(full_rows) == len(window_rows) == 11
    # full attention drops nothing
    assert not any("·" in row for row in full_rows)
    dots = [row[10:].count("·") for row in window_rows]
    # the band slides right: q - 512 < k
    assert dots[0] == 0 and dots == sorted(dots) and dots[-1] >= 13


def test_sink_columns_stay_visible_outside_the_window():
    """fixtures/traces/streaming_sinks.jsonl: SmolLM2 with 4 attention sinks and a forced window of 32."""
    from pathlib import Path

    from kvtui.app.loader import load_trace

    trace = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "streaming_sinks.jsonl"
    loaded = load_trace(str(trace))
    lines = mask_lines(loaded.header, loaded.events, step_end(loaded.events, 5))
    assert lines[4].startswith("  sliding window W=32 + 4 sinks · layers 0, 1, 2,")
    # keys 0-3 (sinks), 4..18 dropped (18 = 50 - 32), 19..50 the band
    row = lines.index("     q 50 " + "█" * 4 + "·" * 15 + "█" * 32)
    view = MaskView()
    view.events = loaded.events
    view.view = View(replay(loaded.header, loaded.events[: step_end(loaded.events, 5)]))
    cells = [
        (seg.text, seg.style.color.name if seg.style and seg.style.color else None)
        for seg in view.render_row(row, 100)
        for _ in seg.text
    ]
    colors = [color for _, color in cells[10:61]]
    assert colors[:4] == [REGION_STYLE[SINK].color.name] * 4
    assert colors[4:19] == [REGION_STYLE[MASKED].color.name] * 15
    assert (
        colors[19:50] == [REGION_STYLE[CACHED].color.name] * 31
        and colors[50] == REGION_STYLE[CHUNK].color.name
    )
