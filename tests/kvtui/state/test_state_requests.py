"""The requests reducer (kvtui/state/requests.py): emitted tokens, TTFT and edits of a request's sequence."""

from __future__ import annotations

from kvtui.state import replay
from tests.kvtui.state.reducer_events import HEADER, Events, arrive


def test_tokens_ttft_and_edit_in_prompt_discards_generated():
    e = Events()
    arrive(e, "a", [1, 2, 3])
    e("token_emitted", request_id="a", position=3, token_id=7, text=" x")
    e("token_emitted", request_id="a", position=4, token_id=8, text=" y")
    s = replay(HEADER, e.out)
    req = s.requests["a"]
    assert req.token_ids == [1, 2, 3, 7, 8] and req.num_output == 2
    assert req.ttft == e.out[1]["t"] - e.out[0]["t"]
    assert s.itl_values() == [e.out[2]["t"] - e.out[1]["t"]]
    e("edit", request_id="a", position=1, kind="replace", token_ids=[9], texts=["t9"], num_deleted=1)
    s = replay(HEADER, e.out)
    req = s.requests["a"]
    assert req.token_ids == [1, 9, 3] and req.prompt_len == 3 and req.texts == ["t1", "t9", "t3"]
    e("edit", request_id="a", position=0, kind="insert", token_ids=[5], texts=["t5"], num_deleted=0)
    e("edit", request_id="a", position=3, kind="delete", token_ids=[], texts=[], num_deleted=1)
    s = replay(HEADER, e.out)
    assert s.requests["a"].token_ids == [5, 1, 9]


def test_edit_in_generated_part_keeps_prompt():
    e = Events()
    arrive(e, "a", [1, 2])
    for i, tok in enumerate([7, 8, 9]):
        e("token_emitted", request_id="a", position=2 + i, token_id=tok, text=f"g{tok}")
    e("edit", request_id="a", position=3, kind="replace", token_ids=[6], texts=["g6"], num_deleted=1)
    s = replay(HEADER, e.out)
    assert s.requests["a"].token_ids == [1, 2, 7, 6] and s.requests["a"].prompt_len == 2
    # the next emitted token continues after the edit
    e("token_emitted", request_id="a", position=4, token_id=5, text="g5")
    assert replay(HEADER, e.out).requests["a"].token_ids == [1, 2, 7, 6, 5]
