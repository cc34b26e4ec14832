"""Tab 6 in live mode: the cursor moves past a finished request's last token, and `i` there inserts after it
(a new turn), as docs/concepts.md and the engine's fork refusal say."""

from __future__ import annotations

import pytest

from engine.engine import Engine, EngineConfig, SamplingParams
from kvtui.app import KvtuiApp
from kvtui.app.feed import EventFeed, RecordingController
from kvtui.app.feed_messages import FeedHeader
from kvtui.widgets.token_strip import END_SLOT
from tests.helpers.tiny_models import tiny_model

SIZE = (100, 32)


def _finished_run() -> tuple[dict, list[dict], str, int]:
    engine = Engine.from_model(
        tiny_model("llama-gqa"), config=EngineConfig(device="cpu", block_size=4, num_blocks=64)
    )
    events: list[dict] = []
    engine.trace.listeners.append(events.append)
    rid = engine.submit(list(range(5, 15)), SamplingParams(max_tokens=4))
    while engine.has_unfinished():
        engine.step()
    return engine, events, rid, len(engine.core.request(rid).tokens)


@pytest.mark.anyio
async def test_end_then_right_goes_past_the_last_token_and_i_inserts_there():
    engine, events, rid, n = _finished_run()
    feed, controller = EventFeed(), RecordingController()
    app = KvtuiApp(
        source="fake-engine", live=True, feed=feed, controller=controller, clock=lambda: 0.0, frame_rate=None
    )
    async with app.run_test(size=SIZE) as pilot:
        feed.put(FeedHeader(engine.trace.header))
        for ev in events:
            feed.put_event(ev)
        app.pump()
        app.select_request(rid)
        await pilot.press("escape", "6", "end", "right")
        strip = app.query_one("#token-strip")
        assert strip.position() == n and strip.selection() == (n, n)
        shown = [strip.render_line(y).text for y in range(strip.row_count(SIZE[0]))]
        assert "after the last token" in shown[1] and any(
            line.rstrip().endswith(END_SLOT) for line in shown[3:]
        )
        # one more step right stays there
        await pilot.press("right")
        assert strip.position() == n
        # replace and delete need a token: refused with one line, nothing sent
        await pilot.press("d")
        assert not controller.calls
        assert any("only i (insert) works" in note.message for note in app._notifications)
        await pilot.press("i")
        assert app.input_mode == "insert"
        assert "insert after the last token" in app.query_one("#small-input").placeholder
        await pilot.press(*"next turn", "enter")
        assert controller.calls[-1] == ("edit", rid, n, "next turn", "insert", 1, None)


def test_an_insert_after_the_last_token_runs_a_new_turn_on_the_kept_cache():
    engine, events, rid, n = _finished_run()
    # what the app sends for `i` at the end slot: position n, no token to check there
    engine.edit(rid, n, [7, 8], kind="insert", expected_token=None)
    cut = next(ev for ev in reversed(events) if ev["type"] == "invalidate")
    # nothing computed before is dropped; only what never had K/V is computed
    assert cut["dropped"] == [] and cut["first_recomputed"] >= n - 1
    while engine.has_unfinished():
        engine.step()
    tokens = engine.core.request(rid).tokens
    assert len(tokens) > n + 2 and tokens[n : n + 2] == [7, 8]
