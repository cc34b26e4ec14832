"""Safe live edits: what the UI sends (selection, expected token), editing while scrubbed back, a dead engine
worker, and quitting mid-generation (the worker joins; the saved trace is whole)."""

from __future__ import annotations

import asyncio
import time

import pytest
from click.testing import CliRunner

from engine.trace import read_trace
from kvtui.app import KvtuiApp
from kvtui.app.feed import EngineWorker, EventFeed, RecordingController
from kvtui.app.feed_messages import EngineDied, FeedHeader

SIZE = (100, 32)
pytestmark = pytest.mark.anyio


def live_app(feed, controller) -> KvtuiApp:
    return KvtuiApp(
        source="fake-engine", live=True, feed=feed, controller=controller, clock=lambda: 0.0, frame_rate=None
    )


def feed_trace(feed: EventFeed, header: dict, events: list[dict]) -> None:
    feed.put(FeedHeader(header))
    for ev in events:
        feed.put_event(ev)


def _first_request_with(events, n_tokens: int) -> str:
    lengths: dict[str, int] = {}
    for ev in events:
        if ev["type"] == "request_arrived":
            lengths[ev["request_id"]] = len(ev["prompt_token_ids"])
    return next(rid for rid, n in lengths.items() if n >= n_tokens)


async def test_shift_arrows_select_a_range_and_the_box_says_what_goes(small_trace):
    header, events = small_trace
    feed, controller = EventFeed(), RecordingController()
    app = live_app(feed, controller)
    async with app.run_test(size=SIZE) as pilot:
        feed_trace(feed, header, events)
        app.pump()
        rid = _first_request_with(events, 6)
        app.select_request(rid)
        await pilot.press("escape", "6", "home", "right", "shift+right", "shift+right", "r")
        req = app.view.request
        small = app.query_one("#small-input")
        assert app.input_mode == "replace"
        selected = "".join(req.texts[1:4])
        assert f"replace {selected!r} (positions 1-3, 3 tokens)" in small.placeholder, small.placeholder
        # the box starts empty; the first selected token's own leading space goes with typed text that has none
        lead = " " if req.texts[1].startswith(" ") else ""
        assert small.value == ""
        await pilot.press(*"a much longer replacement text", "enter")
        assert controller.calls[-1] == (
            "edit",
            rid,
            1,
            lead + "a much longer replacement text",
            "replace",
            3,
            req.token_ids[1],
        )
        # a plain arrow drops the selection: one token again, and delete sends the token it saw
        await pilot.press("right", "d")
        assert controller.calls[-1] == ("edit", rid, 4, "", "delete", 1, req.token_ids[4])
        await pilot.press("shift+left", "shift+left", "d")
        assert controller.calls[-1] == ("edit", rid, 2, "", "delete", 3, req.token_ids[2])


async def test_editing_while_scrubbed_back_jumps_to_live_or_says_why_not(small_trace):
    header, events = small_trace
    edit_at = next(i for i, ev in enumerate(events) if ev["type"] == "edit" and ev["kind"] == "replace")
    edit = events[edit_at]
    rid, m = edit["request_id"], edit["position"]
    feed, controller = EventFeed(), RecordingController()
    app = live_app(feed, controller)
    async with app.run_test(size=SIZE) as pilot:
        feed_trace(feed, header, events)
        app.pump()
        await pilot.press("escape")
        # scrubbed back to before the edit, the token at m is the old one; at live it was replaced
        app.seek(edit_at)
        app.select_request(rid)
        await pilot.press("6")
        app.query_one("#token-strip").set_cursor(m)
        old = app.view.request.token_ids[m]
        assert old != edit["token_ids"][0]
        await pilot.press("r")
        # jumped to live ...
        assert app.following and app.cursor == len(app.timeline)
        # ... and refused: the token there changed
        assert app.input_mode is None and not controller.calls
        assert any("jumped to live" in n.message and "select again" in n.message for n in app._notifications)
        # a position the edit did not touch: jump to live, then the box opens with the live token
        app.seek(edit_at)
        app.query_one("#token-strip").set_cursor(0)
        await pilot.press("r")
        assert app.following and app.input_mode == "replace"
        await pilot.press(*"x", "enter")
        assert controller.calls[-1][:3] == ("edit", rid, 0)
        assert controller.calls[-1][-1] == app.state.requests[rid].token_ids[0]


async def test_a_dead_engine_is_shown_and_the_prompt_box_says_so(small_trace):
    header, events = small_trace
    feed, controller = EventFeed(), RecordingController()
    app = live_app(feed, controller)
    async with app.run_test(size=SIZE) as pilot:
        feed_trace(feed, header, events[:50])
        feed.put(EngineDied("the engine stopped: a step failed (RuntimeError: out of memory)"))
        app.pump()
        await pilot.pause()
        prompt = app.query_one("#prompt")
        assert prompt.disabled and "the engine stopped" in prompt.placeholder
        assert "ENGINE STOPPED" in str(app.query_one("#status").render())
        assert any("out of memory" in n.message for n in app._notifications)
        app.select_request(events[1]["request_id"])
        await pilot.press("6", "r")
        assert app.input_mode is None and not controller.calls


def _slow_tiny_engine():
    """A tiny model whose steps take at least 10 ms: 1000 tokens last 10 s, so the quit lands mid-generation."""
    from engine.engine import Engine, EngineConfig
    from tests.helpers.tiny_models import tiny_model

    engine = Engine.from_model(
        tiny_model("llama-gqa"), config=EngineConfig(device="cpu", block_size=16, num_blocks=256)
    )
    step = engine.step

    def slow_step():
        time.sleep(0.01)
        return step()

    engine.step = slow_step
    return engine


async def test_quitting_mid_generation_stops_the_worker_and_leaves_a_whole_trace(tmp_path):
    from kvtui.commands.trace_commands import stats

    trace = tmp_path / "live.jsonl"
    feed = EventFeed()
    worker = EngineWorker(feed, "tiny", None, save_trace=str(trace), engine_factory=_slow_tiny_engine)
    app = live_app(feed, worker)
    worker.start()
    async with app.run_test(size=SIZE) as pilot:
        # the tiny model has 1024 positions
        worker.submit([5, 6, 7, 8, 9, 10, 11], max_tokens=1000)
        deadline = time.monotonic() + 60
        # wait until it is generating
        while time.monotonic() < deadline:
            app.pump()
            if app.state is not None and app.state.counts.get("token_emitted", 0) >= 5:
                break
            await asyncio.sleep(0.05)
        assert app.state.counts.get("token_emitted", 0) >= 5
        await pilot.press("q")
    assert not worker.thread.is_alive()
    # every line whole, no truncated tail
    parsed = read_trace(trace, strict=True)
    assert not parsed.truncated_tail
    finished = [e for e in parsed.events if e["type"] == "request_finished"]
    assert finished and finished[-1]["reason"] == "aborted"
    assert 5 <= finished[-1]["num_output_tokens"] < 1000
    result = CliRunner().invoke(stats, [str(trace)])
    assert result.exit_code == 0 and "all" in result.output and "warning" not in result.output, result.output


async def test_replace_keeps_the_tokens_leading_space_and_shows_the_result_before_it_is_sent(small_trace):
    from kvtui.widgets.base import TextLine

    header, events = small_trace
    feed, controller = EventFeed(), RecordingController()
    app = live_app(feed, controller)
    async with app.run_test(size=SIZE) as pilot:
        feed_trace(feed, header, events)
        app.pump()
        await pilot.press("escape")
        # a token with a leading space, like " sky" in "Why is the sky blue?"
        rid, m = next(
            (rid, i)
            for rid, req in app.state.requests.items()
            for i, text in enumerate(req.texts)
            if i > 2 and text.startswith(" ") and i + 2 < len(req.texts)
        )
        app.select_request(rid)
        await pilot.press("6")
        app.query_one("#token-strip").set_cursor(m)
        await pilot.press("r")
        texts = app.view.request.texts
        # nothing invisible in the box
        assert app.query_one("#small-input").value == ""
        await pilot.press(*"ocean")
        preview = app.query_one("#edit-preview", TextLine)
        assert preview.display
        expected = "".join(texts[m - 2 : m]) + " ocean" + "".join(texts[m + 1 : m + 3])
        assert expected in str(preview.render()), str(preview.render())
        await pilot.press("enter")
        assert controller.calls[-1][:5] == ("edit", rid, m, " ocean", "replace")
        assert not preview.display
        # a space typed first is the only one
        await pilot.press("r", *" very")
        assert "  very" not in str(preview.render()) and " very" in str(preview.render())
        await pilot.press("enter")
        assert controller.calls[-1][:5] == ("edit", rid, m, " very", "replace")
