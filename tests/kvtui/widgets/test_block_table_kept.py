"""A request that holds no blocks: its block table lists what the cache keeps of its sequence, labelled, and the
header counts the same blocks and tokens as the rows."""

from __future__ import annotations

from pathlib import Path

from kvtui.app.loader import load_trace
from kvtui.state import CACHED, replay
from kvtui.widgets.base import View
from kvtui.widgets.block_pool import block_details
from kvtui.widgets.block_table import BlockTableView

TRACES = Path(__file__).resolve().parents[3] / "fixtures" / "traces"


def _rows(state, rid: str) -> list[str]:
    widget = BlockTableView(View(state, rid))
    return [widget.render_line(y).text.rstrip() for y in range(widget.row_count(160))]


def test_a_waiting_request_shows_the_blocks_it_will_hit():
    trace = load_trace(str(TRACES / "shared_system_8users.jsonl"))
    # user1 queued behind user0, which has put the shared system prompt in the tree: the state just before
    # user1's own prefix lookup
    k = next(
        k
        for k, ev in enumerate(trace.events)
        if ev["type"] in ("prefix_match", "block_shared") and ev["request_id"] == "user1"
    )
    state = replay(trace.header, trace.events[:k])
    assert state.requests["user1"].status == "waiting" and not state.tables.get("user1")
    rows = _rows(state, "user1")
    assert rows[0] == "user1 210 tokens: will hit 192 (12 blocks), 18 to compute"
    assert rows[2] == " will hit: L0-L11, 192 tokens from the prefix tree"
    block_rows = [r for r in rows if r.startswith(" L")]
    assert [r.split()[0] for r in block_rows] == [f"L{i}" for i in range(12)]
    assert rows[-1] == " rest: 18 tokens to compute, no blocks yet"


def test_a_finished_requests_header_rows_and_pool_agree_on_its_tail():
    trace = load_trace(str(TRACES / "multi_turn_chat.jsonl"))
    state = replay(trace.header, trace.events)
    req = state.requests["chat"]
    rows = _rows(state, "chat")
    # six whole blocks in the tree and the partly filled last one, kept as a tail: 6 * 16 + 8 tokens
    assert rows[0] == "chat finished · tree keeps 7/7 blocks (104 tok)"
    block_rows = [r for r in rows if r.startswith(" L")]
    assert len(block_rows) == 7
    physical = [int(r.split()[1][1:]) for r in block_rows]
    # every row is a block the pool legend counts as cached
    assert all(state.block_state(p) == CACHED for p in physical)
    tail = block_rows[-1].split()
    assert tail[2:4] == ["8/16", "tail"]
    assert rows[-1] == f" rest: {req.num_tokens - 104} token in no kept block"
    # the tail's tokens are the request's, in the pool's details of that block too
    text = "".join(req.texts[96:104])
    assert text in block_details(state, physical[-1]).plain.replace("\n", "")
