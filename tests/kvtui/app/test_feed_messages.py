"""The live feed's typed messages (kvtui/app/feed_messages.py): what the engine thread puts comes out of the
`EventFeed` unchanged and in order; what the UI asks of the `EngineWorker` is queued as typed commands; none
can be changed after it is made."""

from __future__ import annotations

import pickle

import pytest

from kvtui.app.feed import EngineWorker, EventFeed
from kvtui.app.feed_messages import (
    AbortRequest,
    EditTokens,
    EngineDied,
    FeedEvent,
    FeedHeader,
    FeedNotice,
    ForkRequest,
    StopEngine,
    SubmitPrompt,
)

FEED_ITEMS = [
    FeedHeader({"type": "header", "schema": 1, "block_size": 4}),
    FeedEvent({"seq": 0, "t": 0.0, "type": "request_arrived", "request_id": "r0"}),
    FeedNotice("edit failed: position 99 is out of range", "error"),
    EngineDied("the engine stopped: a step failed (RuntimeError: out of memory)"),
]
COMMANDS = [
    SubmitPrompt([{"role": "user", "content": "hi"}], 32, 0.8, 7),
    AbortRequest("r0"),
    EditTokens("r0", 2, " dog", "replace", 1, 4711),
    ForkRequest("r0", 2),
    StopEngine(),
]


def test_every_feed_item_comes_out_of_the_feed_as_it_went_in():
    feed = EventFeed()
    for item in FEED_ITEMS:
        feed.put(item)
    feed.put_event({"seq": 1, "type": "step_end"})
    feed.notice("model ready")
    assert feed.drain() == [
        *FEED_ITEMS,
        FeedEvent({"seq": 1, "type": "step_end"}),
        FeedNotice("model ready", "information"),
    ]
    assert feed.drain() == []


def test_the_worker_queues_what_the_ui_asks_as_typed_commands():
    worker = EngineWorker(EventFeed(), "tiny", None)
    worker.submit([{"role": "user", "content": "hi"}], 32, temperature=0.8, seed=7)
    worker.abort("r0")
    worker.edit("r0", 2, " dog", "replace", num_tokens=1, expected_token=4711)
    worker.fork("r0", 2)
    # the thread never started: stop only queues
    worker.stop()
    queued = [worker.commands.get_nowait() for _ in range(worker.commands.qsize())]
    assert queued == COMMANDS


@pytest.mark.parametrize("message", FEED_ITEMS + COMMANDS, ids=lambda m: type(m).__name__)
def test_a_message_round_trips_and_is_frozen(message):
    back = pickle.loads(pickle.dumps(message))
    assert type(back) is type(message) and back == message
    if type(message).__struct_fields__:
        with pytest.raises(AttributeError):
            setattr(message, type(message).__struct_fields__[0], None)
