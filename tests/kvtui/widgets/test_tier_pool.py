"""The pool view with a host tier (kvtui/widgets/tier_pool.py): the tier's heading and slots under the device's
blocks, the cursor running on into them, and a slot's details."""

from __future__ import annotations

import json

import pytest

from engine.trace import read_trace
from kvtui.app import KvtuiApp
from kvtui.state import replay
from kvtui.state.timeline import Timeline
from kvtui.widgets.base import View, show_text
from kvtui.widgets.block_pool import BlockPoolView, block_details, pool_legend
from kvtui.widgets.tier_pool import cell_of, num_cells, slot_at

FIXTURE = "fixtures/traces/host_tier.jsonl"


@pytest.fixture(scope="module")
def state():
    trace = read_trace(FIXTURE, strict=True)
    return replay(trace.header, trace.events)


def test_the_host_slots_follow_the_device_blocks(state):
    widget = BlockPoolView(View(state))
    width, cols = 60, BlockPoolView().columns(60)
    rows = [widget.render_row(y, width) for y in range(widget.row_count(width))]
    texts = [row.text for row in rows]
    device_rows = -(-state.num_blocks // cols)
    size = state.tier_capacity["host"]
    assert widget.row_count(width) == device_rows + 1 + -(-size // cols)
    assert "host 6/6 slots held" in texts[device_rows] and "loaded back 6" in texts[device_rows]
    host_row = rows[device_rows + 1]
    assert host_row.text.startswith("   h0 ")
    glyphs = host_row.text[6::2][:size]
    assert glyphs == "".join("□" if slot in state.tier_slots["host"] else "·" for slot in range(size))
    # held slots are drawn in the host role's colour
    host = widget.palette()["host"].color
    assert {seg.style.color for seg in host_row if seg.text.strip() == "□"} == {host}
    assert "host 6/6" in pool_legend(state).plain


@pytest.mark.anyio
async def test_the_cursor_runs_into_the_host_slots(state):
    trace = read_trace(FIXTURE, strict=True)
    app = KvtuiApp(
        Timeline(trace.header, trace.events), source="host_tier", clock=lambda: 0.0, frame_rate=None
    )
    async with app.run_test(size=(80, 24)) as pilot:
        app.seek(len(trace.events))
        await pilot.pause()
        await pilot.press("end")
        await pilot.pause()
        grid = app.query_one(BlockPoolView)
        size = state.tier_capacity["host"]
        assert grid.cursor == num_cells(state) - 1 == state.num_blocks + size - 1
        assert slot_at(state, grid.cursor) == ("host", size - 1)
        assert f"host slot h{size - 1}" in str(app.query_one("#block-details").render())
        await pilot.press(*["left"] * size)
        await pilot.pause()
        assert grid.cursor == state.num_blocks - 1 and slot_at(state, grid.cursor) is None
        assert f"block P{state.num_blocks - 1}" in str(app.query_one("#block-details").render())
    assert cell_of(state, "host", 2) == state.num_blocks + 2


def test_a_host_slot_says_what_it_holds(state):
    slot, held = next(iter(sorted(state.tier_slots["host"].items())))
    text = block_details(state, cell_of(state, "host", slot)).plain
    assert f"host slot h{slot}" in text and "held" in text
    assert held.hash in text and held.parent_hash in text and f"block L{held.logical}" in text
    assert show_text("".join(held.texts)) in text.replace("\n", "")


def test_a_pool_without_tiers_draws_no_tier_rows(small_trace):
    header, events = small_trace
    state = replay(header, events)
    widget = BlockPoolView(View(state))
    cols = widget.columns(80)
    assert widget.row_count(80) == -(-state.num_blocks // cols)
    assert num_cells(state) == state.num_blocks and "host" not in pool_legend(state).plain


def test_a_host_slot_says_whether_a_load_pays_as_the_bench_measured(state, tmp_path, monkeypatch):
    from kvtui.widgets.tier_pool import load_against_recompute

    monkeypatch.setenv("KVTUI_CACHE_DIR", str(tmp_path))
    assert "kvtui bench tiers measures" in load_against_recompute(state)
    model = state.header["model"]["name"]
    figure = {
        "model": model,
        "block_size": state.block_size,
        "device": "cpu",
        "measured": "2026-12-05 15:16",
        "per_block_seconds": {"recompute": 0.0214, "load": 0.000065, "offload": 0.000085},
    }
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "tiers.json").write_text(json.dumps(figure))
    line = load_against_recompute(state)
    assert "load 0.065 ms a block, compute again 21.4 ms: a load pays" in line and "cpu" in line
    slot = min(state.tier_slots["host"])
    assert "a load pays" in block_details(state, cell_of(state, "host", slot)).plain
    # measured for another block size: not this trace's figure
    (tmp_path / "bench" / "tiers.json").write_text(json.dumps({**figure, "block_size": state.block_size + 1}))
    assert "kvtui bench tiers measures" in load_against_recompute(state)
