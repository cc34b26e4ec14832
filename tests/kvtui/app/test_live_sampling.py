"""Live mode's prompt bar (temperature, seed, max tokens) and stopping a request: the app side with a recording
controller, the engine side through the worker's command handler on a real tiny model."""

from __future__ import annotations

import pytest

from engine.engine import Engine, EngineConfig
from kvtui.app import KvtuiApp
from kvtui.app.feed import EngineWorker, EventFeed, RecordingController
from kvtui.app.feed_messages import AbortRequest, FeedHeader, SubmitPrompt
from tests.helpers.tiny_models import random_prompts, tiny_model

pytestmark = pytest.mark.anyio
SIZE = (120, 36)


def live_app(feed, controller) -> KvtuiApp:
    return KvtuiApp(
        source="fake-engine",
        live=True,
        feed=feed,
        controller=controller,
        clock=lambda: 0.0,
        frame_rate=None,
        max_tokens=32,
    )


async def test_prompt_bar_sends_temperature_seed_and_max_tokens(small_trace):
    header, _ = small_trace
    feed, controller = EventFeed(), RecordingController()
    app = live_app(feed, controller)
    async with app.run_test(size=SIZE) as pilot:
        feed.put(FeedHeader(header))
        app.pump()
        await pilot.click("#prompt")
        # empty boxes: greedy, no seed, the --max-tokens default
        await pilot.press(*"hi", "enter")
        assert controller.calls[-1] == ("submit", [{"role": "user", "content": "hi"}], 32)
        assert controller.sampling[-1] == {"temperature": 0.0, "seed": None}
        await pilot.click("#temperature")
        # Enter in a box goes back to the prompt
        await pilot.press(*"0.8", "tab", *"7", "tab", *"5", "enter")
        assert app.focused.id == "prompt"
        await pilot.press(*"again", "enter")
        assert controller.calls[-1] == ("submit", [{"role": "user", "content": "again"}], 5)
        assert controller.sampling[-1] == {"temperature": 0.8, "seed": 7}
        # a bad value is named, and nothing is sent
        app.query_one("#seed").value = "x1"
        await pilot.click("#prompt")
        await pilot.press(*"no", "enter")
        await pilot.pause()
        assert controller.calls[-1][1] != [{"role": "user", "content": "no"}]
        assert any("seed 'x1'" in n.message for n in app._notifications)


async def test_s_stops_the_selected_running_request(small_trace):
    header, events = small_trace
    feed, controller = EventFeed(), RecordingController()
    app = live_app(feed, controller)
    first_token = next(i for i, ev in enumerate(events) if ev["type"] == "token_emitted")
    rid = events[first_token]["request_id"]
    async with app.run_test(size=SIZE) as pilot:
        feed.put(FeedHeader(header))
        for ev in events[: first_token + 1]:
            feed.put_event(ev)
        app.pump()
        await pilot.press("escape")
        app.select_request(rid)
        await pilot.press("s")
        assert controller.calls[-1] == ("abort", rid)
        finished = next(ev["request_id"] for ev in events if ev["type"] == "request_finished")
        for ev in events[first_token + 1 :]:
            feed.put_event(ev)
        app.pump()
        app.select_request(finished)
        # a finished request is not sent again
        await pilot.press("s")
        assert controller.calls[-1] == ("abort", rid)


def test_the_worker_submits_with_sampling_and_aborts():
    engine = Engine.from_model(tiny_model(), config=EngineConfig(device="cpu", num_blocks=32))
    worker = EngineWorker(EventFeed(), "tiny", None)
    (prompt,) = random_prompts([12])
    worker._execute(engine, SubmitPrompt(prompt, 5, 0.9, 1234))
    worker._execute(engine, SubmitPrompt(prompt, 5, 0.9, 1234))
    (a, b) = list(engine.requests)
    assert engine.requests[a].params.temperature == 0.9 and engine.requests[a].params.seed == 1234
    while engine.has_unfinished():
        engine.step()
    # same seed, same sample
    assert engine.output(a).token_ids == engine.output(b).token_ids
    worker._execute(engine, SubmitPrompt(prompt, 50, 0.0, None))
    c = list(engine.requests)[-1]
    engine.step()
    worker._execute(engine, AbortRequest(c))
    out = engine.output(c)
    assert out.finish_reason == "aborted" and len(out.token_ids) < 50 and not engine.has_unfinished()


async def test_p_opens_the_prompt_box_a_send_leaves_it_and_enter_in_max_tokens_sends(small_trace):
    from textual.widgets import Input

    header, _ = small_trace
    feed, controller = EventFeed(), RecordingController()
    app = live_app(feed, controller)
    async with app.run_test(size=SIZE) as pilot:
        feed.put(FeedHeader(header))
        app.pump()
        # the views have the keys at start: `p` opens the box, it types nothing into it
        assert not isinstance(app.focused, Input)
        await pilot.press("p")
        assert app.focused.id == "prompt" and app.focused.value == ""
        await pilot.press(*"What is a KV cache?", "enter")
        assert controller.calls[-1] == ("submit", [{"role": "user", "content": "What is a KV cache?"}], 32)
        # the box let go: the next `p` opens it again, empty
        assert not isinstance(app.focused, Input)
        await pilot.press("p")
        assert app.focused.id == "prompt" and app.focused.value == ""
        await pilot.press(*"again")
        await pilot.click("#max-tokens")
        await pilot.press(*"5", "enter")
        assert controller.calls[-1] == ("submit", [{"role": "user", "content": "again"}], 5)
