"""Ring memory vs what full attention would hold on the window layers (kvtui/state/ring_memory.py, rings view)."""

from kvtui.state import replay
from kvtui.state.ring_memory import ring_memory
from kvtui.widgets.base import View
from kvtui.widgets.ring import RingView

# Gemma 3 270M's shape as a trace header carries it: 15 window layers (W=512), 3 full, 1 KV head of 256, fp32
GEMMA3 = {
    "model": {
        "kv_heads": 1,
        "head_dim": 256,
        "elem_bytes": 4,
        "windows": [None if i % 6 == 5 else 512 for i in range(18)],
    }
}
PER_TOKEN = 2 * 1 * 256 * 4


def test_equal_below_the_window_then_the_ring_stays_flat():
    short = ring_memory(GEMMA3, 300)
    assert short.ring_bytes == short.full_bytes == 15 * 300 * PER_TOKEN and short.saved == 0
    at_w = ring_memory(GEMMA3, 512)
    assert at_w.ring_bytes == at_w.full_bytes == at_w.ring_capacity == 15 * 512 * PER_TOKEN
    long = ring_memory(GEMMA3, 4096)
    # flat past W
    assert long.ring_bytes == 15 * 512 * PER_TOKEN
    assert long.full_bytes == 15 * 4096 * PER_TOKEN and long.saved == 15 * (4096 - 512) * PER_TOKEN
    # the full layers grow either way
    assert long.paged_bytes == 3 * 4096 * PER_TOKEN
    sinks = ring_memory({"model": {**GEMMA3["model"], "sink_tokens": 4}}, 4096)
    assert sinks.ring_bytes == 15 * 516 * PER_TOKEN


def test_no_window_layers_no_memory_line():
    assert (
        ring_memory({"model": {"kv_heads": 3, "head_dim": 64, "elem_bytes": 4, "windows": [None] * 30}}, 99)
        is None
    )


def test_rings_view_draws_both_bars_as_the_context_grows(small_trace):
    header, events = small_trace
    state = replay(header, events)
    ring = next(iter(state.rings.values()))
    req = state.requests[ring.request_id]
    context = max(req.num_computed, max(ring.slots) + 1)
    memory = ring_memory(state.header, context)
    # this trace's window (W=6) is far shorter than its requests
    assert memory.saved > 0
    # rows 2-4, under the heading and the legend of the slots' roles
    out = [RingView(View(state, ring.request_id)).render_line(y).text for y in range(1, 5)]
    assert f"{ring.request_id} at {context} tokens" in out[1]
    assert out[2].lstrip().startswith("rings") and out[3].lstrip().startswith("full attention")
    bars = [line.count("█") for line in out[2:4]]
    assert 0 < bars[0] < bars[1]


def test_gemma3_fixture_rings_stop_growing_at_512():
    """The trace recorded from Gemma 3 270M: past 512 tokens its rings hold 15 x 512 positions, full attention more."""
    from pathlib import Path

    from kvtui.app.loader import load_trace

    loaded = load_trace(
        str(Path(__file__).resolve().parents[3] / "fixtures/traces/gemma3_hybrid_window.jsonl")
    )
    state = replay(loaded.header, loaded.events)
    assert {w for w in loaded.header["model"]["windows"]} == {512, None}
    story = [r for (rid, _), r in state.rings.items() if rid == "story"]
    # one ring group: the 15 window layers share W
    assert len(story) == 1 and story[0].window == 512
    context = max(max(story[0].slots) + 1, state.requests["story"].num_computed)
    assert context > 600
    memory = ring_memory(state.header, context)
    assert memory.ring_bytes == 15 * 512 * PER_TOKEN and memory.full_bytes == 15 * context * PER_TOKEN
    # row 2: under the heading and the legend
    view = RingView(View(state, "story"))
    view.DEFAULT_WIDTH = 200
    line = view.render_line(2).text
    assert f"story at {context} tokens" in line and "full attention would hold" in line
    # its 3 full layers page their K/V beside the rings: said after the full-attention bar (row 4)
    assert "· the 3 full layers page " in view.render_line(4).text
