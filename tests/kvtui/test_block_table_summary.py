"""The block table's first line: blocks held, tokens, tail waste, and the tokens no block holds yet."""

from __future__ import annotations

from engine.engine import Engine, EngineConfig, SamplingParams
from kvtui.state import CacheState
from kvtui.widgets.base import View
from kvtui.widgets.block_table import BlockTableView, table_summary
from tests.helpers.tiny_models import random_prompts, tiny_model


def _header(state: CacheState, rid: str) -> str:
    return "".join(seg.text for seg in BlockTableView(View(state, rid)).render_row(0, 120)).rstrip()


def test_an_edit_at_position_0_leaves_no_block_and_no_tail_waste():
    engine = Engine.from_model(
        tiny_model("llama-gqa"), config=EngineConfig(device="cpu", block_size=4, num_blocks=64)
    )
    events: list[dict] = []
    engine.trace.listeners.append(events.append)
    rid = engine.submit(random_prompts([21])[0], SamplingParams(max_tokens=6))
    engine.step()
    state = CacheState(engine.trace.header)
    state.apply_all(events)
    # running: 22 tokens in 6 blocks, 2 slots of the last one unused
    assert _header(state, rid) == f"{rid} 6 blocks · 22 tokens · tail waste 2 slots"
    engine.edit(rid, 0, [5], "replace")
    state = CacheState(engine.trace.header)
    state.apply_all(events)
    n = state.requests[rid].num_tokens
    # no block held: no tail waste, and every token is still to compute
    assert _header(state, rid) == f"{rid} 0 blocks · {n} tokens · {n} in no block yet (to compute)"


def test_summary_counts_only_held_blocks():
    assert table_summary([3, 7], 7, 4) == "2 blocks · 7 tokens · tail waste 1 slot"
    assert (
        table_summary([3, -1, -1], 10, 4)
        == "1 block · 10 tokens · tail waste 0 slots · 6 in no block yet (to compute)"
    )
