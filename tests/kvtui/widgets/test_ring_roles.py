"""The rings tab marks each slot's role (kvtui/widgets/ring.py): sinks, recent and heavy hitters in a
`kvtui sinks --trace` trace (tests/kvtui/data/sinks_tiny.jsonl: random:llama:tiny, W = 24, S = 4, 120 tokens,
a sample every 4 positions), and the sink slots of the engine's own rings with attention sinks."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.style import Style
from textual.strip import Strip

from engine.trace import read_trace
from kvtui.app import KvtuiApp
from kvtui.state import replay
from kvtui.state.timeline import Timeline
from kvtui.widgets.base import View
from kvtui.widgets.ring import HEAD_ROWS, LEGEND_ROW, ROWS_PER_RING, RingView

SINKS_TRACE = Path(__file__).resolve().parents[1] / "data" / "sinks_tiny.jsonl"
ROLE_STYLE = {"sink": "sink-slot", "recent": "slot", "heavy": "heavy-slot"}
GLYPH_ROLE = {"s": "sink", "r": "recent", "h": "heavy"}


def sinks_app() -> KvtuiApp:
    """The trace opened the way `kvtui replay` opens it (at the end, the most telling request selected)."""
    parsed = read_trace(SINKS_TRACE, strict=True)
    return KvtuiApp(
        Timeline(parsed.header, parsed.events),
        source=SINKS_TRACE.name,
        clock=lambda: 0.0,
        frame_rate=None,
        open_interesting=True,
    )


def slot_styles(strip: Strip) -> dict[int, Style]:
    """Position shown in each slot cell of a ring's slot row -> the cell's style."""
    return {int(s.text.strip()): s.style for s in strip if s.text.strip().isdigit()}


def check_roles(view: RingView) -> set[str]:
    """Every slot cell drawn, and every mark of the held map, has its role's style (a fresh write: the
    writing style); the roles seen."""
    palette = view.palette()
    seen = set()
    for i, ring in enumerate(view.rings()):
        top = HEAD_ROWS + ROWS_PER_RING * i
        fresh = set(ring.last_written)
        cells = slot_styles(view.render_line(top + 2))
        assert cells, (ring.request_id, view.render_line(top + 2).text)
        for pos, style in cells.items():
            role = ring.role_of(pos)
            seen.add(role)
            expected = "writing" if pos in fresh else ROLE_STYLE[role]
            assert style == palette[expected], (ring.request_id, pos, role)
        # the map of held positions: one glyph a run of positions, in the role of the keys held there
        held = view.render_line(top + 3)
        assert held.text.startswith("  held ")
        for segment in list(held)[1:]:
            for glyph in segment.text.replace("·", "").strip():
                role = GLYPH_ROLE[glyph]
                seen.add(role)
                assert segment.style == palette[ROLE_STYLE[role]], (ring.request_id, glyph)
        assert ("s" in held.text[7:]) == bool(ring.sinks)
    return seen


@pytest.mark.anyio
async def test_the_rings_tab_of_a_sinks_trace_marks_sinks_recent_and_heavy_hitters():
    app = sinks_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("5")
        await pilot.pause()
        assert app.query_one("#tabs").active == "rings"
        view = app.query_one(RingView)
        assert [r.request_id for r in view.rings()] == ["heavy-hitters", "window", "sinks"]
        assert "kvtui sinks: caches of W = 24 slots, S = 4" in view.render_line(0).text
        legend = view.render_line(LEGEND_ROW).text
        for words in ("sink  kept forever", "recent  the window", "heavy  most attention (H2O)", "▼ head"):
            assert words in legend
        heavy_title = view.render_line(HEAD_ROWS).text
        assert "H2O budget=24: 12 heavy hitters + 12 recent of layer 0, KV head 0" in heavy_title
        # H2O has no write head (a new key takes a dropped key's slot): the marker is its newest key
        heavy = view.rings()[0]
        assert f"newest→slot {heavy.head}" in heavy_title and "head→" not in heavy_title
        assert heavy.slots[heavy.head] == heavy.end - 1
        assert f"head→slot {view.rings()[1].head}" in view.render_line(HEAD_ROWS + ROWS_PER_RING).text
        # every layer of a sinks trace is a window layer: no "the 0 full layers page 0 B"
        memory = view.render_line(LEGEND_ROW + 1).text
        assert "window layers: rings" in memory and "full layers" not in view.render_line(LEGEND_ROW + 3).text
        assert check_roles(view) == {"sink", "recent", "heavy"}
        # a step back: the caches as they were one sample earlier, still each slot in its role
        await pilot.press("less_than_sign")
        await pilot.pause()
        assert check_roles(view) >= {"sink", "recent"}


def test_the_engine_s_rings_with_attention_sinks_mark_the_sink_slots():
    import torch

    from engine import Engine, EngineConfig, SamplingParams
    from tests.helpers.tiny_models import random_prompts, tiny_model

    config = EngineConfig(block_size=4, num_blocks=64, max_batched_tokens=8, sink_tokens=2, window=6)
    engine = Engine.from_model(tiny_model("llama-gqa"), config=config)
    events = []
    engine.trace.listeners.append(events.append)
    with torch.inference_mode():
        engine.generate(random_prompts([20]), SamplingParams(max_tokens=5))
    state = replay(engine.trace.header, events)
    rid = events[0]["request_id"]
    view = RingView(View(state, rid))
    view.DEFAULT_WIDTH = 100
    assert {ring.sinks for ring in view.rings()} == {2}
    assert check_roles(view) == {"sink", "recent"}
    assert "sink  kept forever" in view.render_line(LEGEND_ROW).text
    assert "heavy" not in view.render_line(LEGEND_ROW).text
    summary = view.render_line(HEAD_ROWS + 4).text
    assert "holds 2 sink · 6 recent" in summary


@pytest.mark.anyio
async def test_replay_opens_a_sinks_trace_on_the_rings_tab():
    """`kvtui replay` of a sinks trace (loaded in its worker, as the command does) opens where its story is."""
    app = KvtuiApp(
        source=SINKS_TRACE.name, trace_path=str(SINKS_TRACE), open_interesting=True, frame_rate=None
    )
    async with app.run_test(size=(120, 40)) as pilot:
        # the loader's worker, however long a loaded machine takes
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.timeline is not None and app.loading is None
        assert app.query_one("#tabs").active == "rings"
