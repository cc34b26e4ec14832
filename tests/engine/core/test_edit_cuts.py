"""Where an edit cuts a block table (engine/core/edit_cuts.py), without a model: the cut block is copied when a
block is free for the copy, and recomputed from its start when none is."""

from __future__ import annotations

from engine.config import EngineConfig
from engine.core.edit_cuts import plan_table
from engine.core.engine_core import EngineCore
from engine.core.request import SamplingParams
from engine.models.shape import ModelShape
from engine.trace.writer import TraceSink

SHAPE = ModelShape(
    "m", layers=1, q_heads=1, kv_heads=1, head_dim=1, dtype="float32", elem_bytes=4, windows=(None,)
)


def _two_running(num_blocks: int) -> tuple[EngineCore, list[dict]]:
    """Two 8-token prompts in blocks of 4, both computed in one step: four blocks held, all in the tree."""
    sink = TraceSink(clock=lambda: 0.0)
    events: list[dict] = []
    sink.listeners.append(events.append)
    core = EngineCore(SHAPE, EngineConfig(num_blocks=num_blocks, block_size=4), sink)
    core.add_request(list(range(10, 18)), SamplingParams(max_tokens=5), request_id="a")
    core.add_request(list(range(30, 38)), SamplingParams(max_tokens=5), request_id="b")
    core.update_from_output(core.schedule(), lambda index, req: 7)
    return core, events


def test_plan_cuts_inside_a_block_or_at_its_edge():
    inside = plan_table(6, 3, 4)
    assert (inside.partial, inside.first_released, inside.copy) == (1, 2, True)
    edge = plan_table(8, 3, 4)
    assert (edge.partial, edge.first_released) == (None, 2)
    # a keep past the table's end keeps the whole table
    assert plan_table(20, 3, 4).first_released == 3


def test_an_edit_inside_a_cached_block_copies_it_when_a_block_is_free():
    core, _ = _two_running(num_blocks=5)
    table = list(core.request("a").block_table)
    _, event = core.edit("a", 6, [99])
    assert event["first_recomputed"] == 6
    assert event["kept"] == [table[0]] and event["copied"] == [[table[1], 4]] and event["dropped"] == []
    assert core.request("a").block_table == [table[0], 4]


def test_with_no_block_for_the_copy_the_cut_block_is_recomputed_from_its_start():
    core, events = _two_running(num_blocks=4)
    assert core.cache.num_available() == 0
    table = list(core.request("a").block_table)
    _, event = core.edit("a", 6, [99])
    assert event["first_recomputed"] == 4
    assert event["kept"] == [table[0]] and event["copied"] == [] and event["dropped"] == [table[1]]
    req = core.request("a")
    assert req.block_table == [table[0]] and req.num_computed == 4
    # the request goes on from there: its next step recomputes the block
    while core.has_unfinished():
        scheduled = core.schedule()
        if scheduled is not None:
            core.update_from_output(scheduled, lambda index, req: 7)
    assert [e["reason"] for e in events if e["type"] == "request_finished"] == ["length", "length"]
