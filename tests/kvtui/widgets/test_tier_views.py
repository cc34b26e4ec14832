"""The tree, the metrics and the miss explainer with a host tier: host blocks drawn under their parents in the
host colour, hit tokens by tier and bytes moved, and how much of a prompt came from host."""

from __future__ import annotations

import pytest

from engine.trace import read_trace
from kvtui.state import replay
from kvtui.state.tier_tree import TierRun
from kvtui.widgets.base import View
from kvtui.widgets.charts import ChartsView
from kvtui.widgets.miss import explain
from kvtui.widgets.radix_tree import RadixTreeView
from tests.kvtui.state.reducer_events import HEADER, Events, arrive

FIXTURE = "fixtures/traces/host_tier.jsonl"


@pytest.fixture(scope="module")
def trace():
    return read_trace(FIXTURE, strict=True)


def test_the_tree_draws_host_runs_in_the_host_colour(trace):
    state = replay(trace.header, trace.events)
    widget = RadixTreeView(View(state))
    host = widget.palette()["host"].color
    rows = widget.rows()
    runs = [i for i, (_, item) in enumerate(rows) if isinstance(item, TierRun)]
    assert runs and "6 blocks in host hang under their parents" in widget.render_row(0, 120).text
    for i in runs:
        run = rows[i][1]
        strip = widget.render_row(i + 1, 120)
        assert "host " in strip.text and f"h{run.slots[0]}" in strip.text
        first = state.tier_slots["host"][run.slots[0]]
        assert f"L{first.logical}" in strip.text
        assert any(seg.style and seg.style.color == host for seg in strip if seg.text.startswith("host "))
    assert len(runs) < len(state.tier_slots["host"]), "a chain of host blocks is one row"


def test_metrics_give_hits_by_tier_and_bytes_moved(trace):
    state = replay(trace.header, trace.events)
    text = "\n".join(row[1] for row in ChartsView(View(state)).lines(200) if row[0] in ("text", "head"))
    hits = state.tier_hits
    assert f"device {hits['device']} hit tokens" in text and f"host {hits['host']} hit tokens" in text
    moves = state.tier_moves["host"]
    assert f"host: 6/6 slots held; in {moves.offloaded} blocks" in text
    assert (
        f"loaded back {moves.loaded} (4.2 MiB)" in text
        and f"dropped {moves.dropped_capacity} when full" in text
    )
    plain = replay(HEADER, [])
    assert not [row for row in ChartsView(View(plain)).lines(200) if "tiers" in str(row)]


def test_the_explainer_says_what_came_from_host(trace):
    state = replay(trace.header, trace.events)
    loaded = [r for r in state.requests.values() if r.loaded]
    assert loaded
    for req in loaded:
        blocks, nbytes = req.loaded["host"]
        text = explain(state, req).plain
        assert (
            f"{blocks * state.block_size} tokens from host ({blocks} blocks loaded back into the device"
            in text
        )
        assert "1.4 MiB" in text and "blue loaded from host" in text
    cold = next(r for r in state.requests.values() if not r.loaded)
    assert "from host" not in explain(state, cold).plain


def test_the_explainer_says_when_host_blocks_found_no_room():
    e = Events()
    arrive(e, "r", list(range(13)))
    e(
        "prefix_match",
        request_id="r",
        prompt_tokens=13,
        matched_tokens=4,
        reason="cache_end",
        detail={"position": 4, "node_id": 1, "not_loaded": 2},
        tiers=["device"],
    )
    state = replay({**HEADER, "config": {"host_blocks": 4}}, e.out)
    text = explain(state, state.requests["r"]).plain
    assert "2 more blocks matched in host but the device had no room to load them: recomputed" in text
    assert "not_loaded=" not in text and "from host (" not in text
