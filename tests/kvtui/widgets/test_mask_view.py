"""kvtui/state/masks.py and kvtui/widgets/mask.py: the attention masks of a step, on a real tiny hybrid-model trace."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from kvtui.app import KvtuiApp
from kvtui.app.loader import load_trace
from kvtui.screens.panel import PanelScreen
from kvtui.state import replay
from kvtui.state.masks import (
    CACHED,
    CHUNK,
    FUTURE,
    HEAVY,
    MASKED,
    SINK,
    Chunk,
    KeptSet,
    LayerKind,
    StepMasks,
    cell,
    layer_kinds,
    request_rules,
    step_masks,
)
from kvtui.state.timeline import Timeline
from kvtui.widgets.base import View
from kvtui.widgets.mask import REGION_STYLE, MaskView
from tests.helpers.tiny_trace import hybrid_trace


def step_end(events, step: int) -> int:
    """The cursor just after step `step`'s step event."""
    return next(i + 1 for i, ev in enumerate(events) if ev["type"] == "step" and ev["step"] == step)


def mask_lines(header, events, cursor, width=100, request_id=None) -> list[str]:
    view = MaskView()
    view.events = list(events)
    state = replay(header, list(events[:cursor]))
    view.view = View(state, request_id=request_id)
    return [view.render_row(y, width).text.rstrip() for y in range(view.row_count(width))]


def assert_cells_match_pair_by_pair(kinds, visible) -> None:
    """`cell` against counting every (query, key) pair's region; `visible` the regions a query reads."""
    for q0, q1, k0, k1, start in itertools.product(range(9), range(1, 12), range(10), range(1, 12), range(6)):
        if q1 <= q0 or k1 <= k0:
            continue
        for kind in kinds:
            frac, counts = cell(kind, start, q0, q1, k0, k1)
            brute = dict.fromkeys((*visible, MASKED, FUTURE), 0)
            for q in range(q0, q1):
                for k in range(k0, k1):
                    brute[kind.region(q, k, start)] += 1
            assert counts == brute
            assert frac == pytest.approx(sum(brute[r] for r in visible) / ((q1 - q0) * (k1 - k0)))


def test_cell_counts_match_pair_by_pair():
    kinds = [LayerKind(None, 0, (0,)), LayerKind(4, 0, (1,)), LayerKind(4, 2, (2,)), LayerKind(1, 1, (3,))]
    assert_cells_match_pair_by_pair(kinds, (CACHED, CHUNK, SINK))


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
    assert "r1 prefill 16..21 (6 queries) · keys 0..21 · 16 cached before this step" in text
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
    assert "r2 prefill 0..17 (18 queries) · keys 0..17 · nothing cached before it" in text
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

    trace = Path(__file__).resolve().parents[3] / "fixtures" / "traces" / "gemma3_hybrid_window.jsonl"
    loaded = load_trace(str(trace))
    lines = mask_lines(loaded.header, loaded.events, step_end(loaded.events, 2))
    assert "story prefill 512..621 (110 queries) · keys 0..621 · 512 cached before this step" in lines[3]
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

    trace = Path(__file__).resolve().parents[3] / "fixtures" / "traces" / "streaming_sinks.jsonl"
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


SINKS_TRACE = Path(__file__).resolve().parents[1] / "data" / "sinks_tiny.jsonl"
FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "traces"


def cache_rows(lines: list[str], request_id: str) -> dict[int, str]:
    """The matrix rows (query -> keys) of one request's chunk: from its heading to the next blank line."""
    first = next(i for i, line in enumerate(lines) if line.startswith(f"{request_id} prefill "))
    rows = {}
    for line in lines[first + 1 :]:
        if not line:
            break
        if line.lstrip().startswith("q "):
            rows[int(line[:10].split()[1])] = line[10:]
    return rows


def test_sinks_trace_draws_each_cache_by_its_own_rule():
    """tests/kvtui/data/sinks_tiny.jsonl (W = 24, S = 4, H2O 12 heavy + 12 recent, 120 tokens, a sample every 4
    positions): at every sample, `window` sees q - 24 < k <= q, `sinks` 0-3 and q - 20 < k <= q, and
    `heavy-hitters` the positions its ring_kept records (rows before the last: those <= q and its 12 newest),
    not the header's W = 20 + 4 sinks for all three."""
    loaded = load_trace(str(SINKS_TRACE))
    header, events = loaded.header, loaded.events
    assert header["kind"] == "sinks" and header["model"]["windows"] == [20, 20]
    kept_events = {ev["end"]: ev for ev in events if ev["type"] == "ring_kept"}
    steps = sorted({ev["step"] for ev in events if ev["type"] == "step"})
    assert len(steps) == 30
    for step in steps:
        # one column a key: 120 keys + the query labels
        lines = mask_lines(header, events, step_end(events, step), width=140)
        window, sinks, heavy = (cache_rows(lines, rid) for rid in ("window", "sinks", "heavy-hitters"))
        end = 4 * (step + 1)
        assert list(window) == list(sinks) == list(heavy) == list(range(end - 4, end))
        ev = kept_events[end]
        for q in range(end - 4, end):
            assert window[q] == "".join("█" if q - 24 < k else "·" for k in range(q + 1))
            assert sinks[q] == "".join("█" if k < 4 or q - 20 < k else "·" for k in range(q + 1))
            assert heavy[q] == "".join("█" if k in ev["kept"] or q - 12 < k else "·" for k in range(q + 1))
        # the last query's row is exactly the recorded set; H2O holds min(q + 1, 24) keys a query, and every
        # row shows that many, so no row of the fixture leaves a held key out
        assert [k for k, c in enumerate(heavy[end - 1]) if c == "█"] == ev["kept"]
        assert all(row.count("█") == min(q + 1, 24) for q, row in heavy.items())
        assert not any("more key" in line for line in lines)
    text = "\n".join(lines)
    assert "sliding window W=24 · layers 0, 1 · each query sees itself + the 23 keys before it" in text
    assert "sliding window W=20 + 4 sinks · layers 0, 1 ·" in text
    assert "heavy hitters (H2O) budget 24 = 12 heavy + 12 recent · layer 0, KV head 0 ·" in text
    assert "ring_kept: the 24 positions held as q 119 read them (12 heavy hitters + 12 recent)" in text


def test_sinks_trace_heavy_hitters_in_the_sink_colour():
    loaded = load_trace(str(SINKS_TRACE))
    cursor = len(loaded.events)
    lines = mask_lines(loaded.header, loaded.events, cursor, width=140)
    row = next(i for i, line in enumerate(lines) if line.startswith("heavy-hitters ")) + 4
    assert lines[row].startswith("    q 116 ")
    view = MaskView()
    view.events = loaded.events
    view.view = View(replay(loaded.header, loaded.events[:cursor]))
    colors = [
        seg.style.color.name if seg.style and seg.style.color else None
        for seg in view.render_row(row, 140)
        for _ in seg.text
    ][10:127]
    # 0..11 heavy hitters, 12..104 dropped, 105..115 recent (cached), 116 the chunk
    assert colors[:12] == [REGION_STYLE[HEAVY].color.name] * 12
    assert colors[12:105] == [REGION_STYLE[MASKED].color.name] * 93
    assert colors[105:116] == [REGION_STYLE[CACHED].color.name] * 11
    assert colors[116] == REGION_STYLE[CHUNK].color.name


def test_sinks_trace_mid_step():
    """A cursor inside a sample: a cache event already applied is drawn, one still ahead is said to be."""
    loaded = load_trace(str(SINKS_TRACE))
    events = loaded.events
    last = len(events) - 1
    assert events[last]["type"] == "step" and events[last - 1]["type"] == "ring_kept"
    # after the heavy hitters' ring_kept, before the step event
    masks = step_masks(list(events), last)
    assert set(masks.caches) == {"window", "sinks", "heavy-hitters"}
    assert masks.caches["heavy-hitters"] is events[last - 1]
    # after the heavy hitters' chunk, before its ring_kept
    lines = mask_lines(loaded.header, events, last - 1, width=140)
    assert cache_rows(lines, "sinks") and not cache_rows(lines, "heavy-hitters")
    assert "  its cache's ring_write / ring_kept comes later in this step (not applied yet)" in lines


def test_engine_traces_keep_the_header_rules():
    """An engine trace's chunks are drawn by the header's layer kinds, whatever their ring events say."""
    header, events = hybrid_trace()
    loaded = load_trace(str(FIXTURES / "streaming_sinks.jsonl"))
    for head, evs in ((header, events), (loaded.header, loaded.events)):
        for step in sorted({ev["step"] for ev in evs if ev["type"] == "step"})[:12]:
            masks = step_masks(list(evs), step_end(evs, step))
            for chunk in masks.chunks:
                assert request_rules(head, masks, chunk.request_id) == layer_kinds(head)


def test_kept_cell_counts_match_pair_by_pair():
    kinds = [KeptSet((0, 3, 6, 7), 2, 4, 8), KeptSet((1, 2, 5, 8, 9, 10), 3, 6, 11), KeptSet((), 1, 1, 4)]
    assert_cells_match_pair_by_pair(kinds, (CACHED, CHUNK, HEAVY))


def test_kept_set_counts_the_keys_it_cannot_show():
    """Budget 4 (2 recent), recorded at q 7 as {0, 3, 6, 7}: q 5 held {0, 3, 4, 5} (shown whole); q 4 held
    {0, 3, 4} and one of 1, 2 that H2O dropped before q 7, which the trace does not say."""
    kind = KeptSet((0, 3, 6, 7), 2, 4, 8)
    assert [kind.unshown(q) for q in range(4, 8)] == [1, 0, 0, 0]
    chunk = Chunk("h", "prefill", 4, 8)
    view = MaskView()
    view.view = View(None)
    rows = [strip.text.rstrip() for strip in view._matrix(chunk, kind, StepMasks(0, [chunk]), 100)]
    assert "  q 4: 1 more key held, dropped before q 7 (not recorded: only the last query's set is)" in rows
    assert rows[-4:] == ["      q 4 █··██", "      q 5 █··███", "      q 6 █··█·██", "      q 7 █··█··██"]
