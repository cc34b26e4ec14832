"""Every message between `kvtui attach`'s UI and its collector (kvtui/sources/collector_messages.py) crosses a
real multiprocessing pipe to another process and back unchanged, and none can be changed after it is made."""

from __future__ import annotations

import multiprocessing

import pytest

from kvtui.sources.collector_messages import (
    AskExplain,
    AskView,
    CollectorFailed,
    CollectorNotice,
    CollectorStopped,
    Explained,
    StopCollecting,
    ViewReady,
)
from kvtui.state.fleet_view import FleetView, TreeRow

VIEW = FleetView(
    index=7,
    t=1.5,
    nodes=3,
    unique=2,
    workers=[{"worker": "sgl", "resident": 2, "stored_per_s": 0.5}],
    notes=["a gap on sgl"],
    tree=[TreeRow(0, 0, 2, "00000000000000ab", ("sgl", "vllm"), "1 2 3 4")],
)
MESSAGES = [
    AskView(with_tree=True),
    AskExplain([1, 2, 3, 9], {"salt": "s", "lora": None}),
    StopCollecting(),
    ViewReady(VIEW, {"messages": 3, "blocks": 5}),
    Explained("prompt tokens against 2 workers"),
    CollectorNotice("collector: no tokenizer", "warning"),
    CollectorStopped({"messages": 3, "malformed": 0}),
    CollectorFailed("the collector failed: RuntimeError: boom"),
]


def _echo(conn) -> None:
    """The other process: send back whatever comes, until None."""
    while (message := conn.recv()) is not None:
        conn.send(message)


def test_every_message_crosses_a_process_and_comes_back_the_same():
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    process = ctx.Process(target=_echo, args=(theirs,), daemon=True)
    process.start()
    try:
        for message in MESSAGES:
            ours.send(message)
            assert ours.poll(30), f"no echo of {message!r}"
            back = ours.recv()
            assert type(back) is type(message) and back == message and back is not message
        # the view inside keeps its own types (tuples stay tuples: the tree compares holders to tuples)
        assert ours.send(MESSAGES[3]) is None and ours.poll(30)
        assert ours.recv().view.tree[0].holders == ("sgl", "vllm")
    finally:
        ours.send(None)
        process.join(10)


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_a_message_is_frozen(message):
    field = type(message).__struct_fields__[0] if type(message).__struct_fields__ else "anything"
    with pytest.raises(AttributeError):
        setattr(message, field, None)
