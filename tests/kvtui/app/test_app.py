"""Pilot tests: every interaction, with an injected clock and a hand-pumped event feed (no timers)."""

from __future__ import annotations

import re

import pytest

from kvtui.app import KvtuiApp
from kvtui.app.feed import EventFeed, RecordingController
from kvtui.app.feed_messages import FeedHeader
from kvtui.screens.panel import PanelScreen
from kvtui.state import replay, state_fingerprint
from kvtui.state.timeline import Timeline
from kvtui.widgets.block_pool import BlockPoolView

SIZE = (100, 32)
pytestmark = pytest.mark.anyio


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def replay_app(trace, clock=None) -> KvtuiApp:
    header, events = trace
    return KvtuiApp(
        Timeline(header, events, keyframe_every=64),
        source="test",
        clock=clock or FakeClock(),
        frame_rate=None,
    )


async def test_step_events_and_engine_steps(small_trace):
    header, events = small_trace
    app = replay_app(small_trace)
    async with app.run_test(size=SIZE) as pilot:
        assert app.cursor == 0
        await pilot.press("full_stop", "full_stop", "full_stop")
        assert app.cursor == 3
        await pilot.press("comma")
        assert app.cursor == 2
        assert state_fingerprint(app.state) == state_fingerprint(replay(header, events[:2]))
        await pilot.press("greater_than_sign")
        assert events[app.cursor - 1]["type"] == "step"
        first_step = app.cursor
        await pilot.press("greater_than_sign", "less_than_sign")
        assert app.cursor == first_step
        assert "event" in str(app.query_one("#status").render())


async def test_seek_markers_percent_and_end(small_trace):
    header, events = small_trace
    app = replay_app(small_trace)
    async with app.run_test(size=SIZE) as pilot:
        # next edit: lands on its invalidate event
        await pilot.press("e")
        assert events[app.cursor - 1]["type"] == "invalidate"
        assert app.view.request_id == events[app.cursor - 1]["request_id"]
        await pilot.press("m")
        ev = events[app.cursor - 1]
        assert ev["type"] == "prefix_match" and ev["matched_tokens"] < ev["prompt_tokens"]
        await pilot.press("x")
        assert events[app.cursor - 1]["type"] == "block_evicted"
        before = app.cursor
        await pilot.press("a", "A")
        assert app.cursor <= before
        await pilot.press("g", *"50", "enter")
        assert app.cursor == round(0.5 * len(events))
        assert state_fingerprint(app.state) == state_fingerprint(replay(header, events[: app.cursor]))
        await pilot.press("G")
        assert app.cursor == len(events)
        await pilot.press("g", *"#10", "enter")
        assert app.cursor == 10
        # from the mask panel: the panel closes and the go-to box takes the keys in sight
        await pilot.press("k")
        await pilot.pause()
        await pilot.press("g", *"#12", "enter")
        await pilot.pause()
        assert app.cursor == 12 and not isinstance(app.screen, PanelScreen)


async def test_play_speed_with_injected_clock(small_trace):
    header, events = small_trace
    clock = FakeClock()
    app = replay_app(small_trace, clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space")
        assert app.playing
        clock.now += 0.1
        app.tick()
        at_1x = app.cursor
        assert at_1x == sum(1 for ev in events if ev["t"] <= 0.1)
        # 1x -> 2x -> 4x
        await pilot.press("plus", "plus")
        assert app.speed == 4.0
        clock.now += 0.1
        app.tick()
        assert app.cursor == sum(1 for ev in events if ev["t"] <= 0.1 + 0.4)
        await pilot.press("minus")
        assert app.speed == 2.0
        clock.now += 100
        app.tick()
        # stops at the end
        assert app.cursor == len(events) and not app.playing
        # play again from the start
        await pilot.press("space")
        assert app.playing and app.cursor == 0


async def test_tabs_selection_and_help(small_trace):
    app = replay_app(small_trace)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("G", "right_square_bracket")
        assert app.view.request_id == app.state.order[1]
        for key, tab in zip("123456", ("pool", "requests", "tree", "metrics", "rings", "tokens")):
            await pilot.press(key)
            assert app.query_one("#tabs").active == tab
        await pilot.press("1", "right", "right")
        assert app.query_one(BlockPoolView).cursor == 2
        await pilot.press("question_mark")
        assert app.screen.__class__.__name__ == "HelpScreen"
        await pilot.press("escape")
        assert app.screen.__class__.__name__ != "HelpScreen"


async def test_every_binding_has_an_id_and_a_palette_entry(small_trace):
    app = replay_app(small_trace)
    async with app.run_test(size=SIZE):
        entries = app.command_entries()
        ids = [binding.id for binding, _ in entries]
        assert all(ids) and len(ids) == len(set(ids))
        assert "replay.play" in ids and "edit.replace" in ids and "pool.owner_mode" in ids
        keys = app.help_text().split("## Keys")[1]
        # keys as typed, no internal names
        assert "| `space` | play/pause |" in keys and "| `?` | help |" in keys
        assert "question_mark" not in keys and "app.help" not in keys and "replay.play" not in keys


async def test_the_command_palette_shows_keys_as_typed_and_no_internal_ids(small_trace):
    from kvtui.screens.palette import command_text

    app = replay_app(small_trace)
    async with app.run_test(size=SIZE):
        texts = [command_text(binding) for binding, _ in app.command_entries()]
        assert "help (?)" in texts and "prev request ([)" in texts and "end of trace (ctrl+end / G)" in texts
        assert not any("_" in text.split("(")[-1] for text in texts), texts


async def test_edit_keys_in_replay_only_notify(small_trace):
    app = replay_app(small_trace)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("G", "r")
        # no crash, a notification instead
        assert app.input_mode is None


# ---------------------------------------------------------------------------------------------- live mode
def live_app(feed, controller) -> KvtuiApp:
    return KvtuiApp(
        source="fake-engine", live=True, feed=feed, controller=controller, clock=FakeClock(), frame_rate=None
    )


def _events_for(events, rid):
    return [ev for ev in events if ev.get("request_id") == rid]


async def test_live_prompt_then_tokens_stream_in(small_trace):
    header, events = small_trace
    feed, controller = EventFeed(), RecordingController()
    app = live_app(feed, controller)
    async with app.run_test(size=SIZE) as pilot:
        assert "waiting for the engine" in str(app.query_one("#status").render())
        feed.put(FeedHeader(header))
        app.pump()
        await pilot.click("#prompt")
        await pilot.press(*"Why is the sky blue?", "enter")
        # live mode sends a chat message by default (the embedded model is an instruct model)
        assert controller.calls == [("submit", [{"role": "user", "content": "Why is the sky blue?"}], 64)]
        first_token = next(i for i, ev in enumerate(events) if ev["type"] == "token_emitted")
        for ev in events[: first_token + 1]:
            feed.put_event(ev)
        app.tick()
        rid = events[first_token]["request_id"]
        # the arrival after our submit is selected
        assert app.view.request_id == "r0"
        assert app.cursor == first_token + 1 and app.following
        await pilot.press("escape", "6")
        strip = app.query_one("#token-strip")
        assert events[first_token]["text"] in strip.render_line(3).text or rid != "r0"
        # the rest streams in, the view follows the end
        for ev in events[first_token + 1 :]:
            feed.put_event(ev)
        app.pump()
        assert app.cursor == len(events)
        assert state_fingerprint(app.state) == state_fingerprint(replay(header, events))
        # scrub back: following stops; F follows again
        await pilot.press("comma")
        assert not app.following and app.cursor == len(events) - 1
        await pilot.press("F")
        assert app.following and app.cursor == len(events)


async def test_live_edit_sends_command_and_shows_the_invalidation(small_trace):
    header, events = small_trace
    edit_at = next(i for i, ev in enumerate(events) if ev["type"] == "edit")
    inv_at = next(i for i, ev in enumerate(events) if ev["type"] == "invalidate")
    rid = events[edit_at]["request_id"]
    feed, controller = EventFeed(), RecordingController()
    app = live_app(feed, controller)
    async with app.run_test(size=SIZE) as pilot:
        feed.put(FeedHeader(header))
        for ev in events[:edit_at]:
            feed.put_event(ev)
        app.pump()
        await pilot.press("escape")
        app.select_request(rid)
        await pilot.press("6", "home", "right", "right", "r")
        assert app.input_mode == "replace"
        # the box offers the token's own leading space
        lead = " " if app.view.request.texts[2].startswith(" ") else ""
        await pilot.press(*"dog", "enter")
        token = app.view.request.token_ids[2]
        assert controller.calls[-1] == ("edit", rid, 2, lead + "dog", "replace", 1, token)
        await pilot.press("i", *"x", "enter")
        assert controller.calls[-1] == ("edit", rid, 2, lead + "x", "insert", 1, token)
        await pilot.press("d")
        assert controller.calls[-1] == ("edit", rid, 2, "", "delete", 1, token)
        await pilot.press("f")
        assert controller.calls[-1] == ("fork", rid, 1)
        # the engine answers with edit + invalidate: the pool marks kept / dropped blocks, the strip the boundary
        for ev in events[edit_at : inv_at + 1]:
            feed.put_event(ev)
        app.pump()
        inv = events[inv_at]
        assert app.state.last_invalidate["seq"] == inv["seq"]
        app.select_request(inv["request_id"])
        strip = app.query_one("#token-strip")
        assert "edit " in strip.render_line(2).text
        assert f"recompute {inv['recompute_tokens']} tok" in strip.render_line(2).text
        await pilot.press("1")
        app.query_one(BlockPoolView)
        from kvtui.widgets.block_pool import edit_marks

        marks = edit_marks(app.state)
        assert all(marks[p] == "dropped" for p in inv["dropped"])


async def test_live_error_notice_becomes_a_notification():
    feed, controller = EventFeed(), RecordingController()
    app = live_app(feed, controller)
    async with app.run_test(size=SIZE) as pilot:
        feed.notice("edit failed: position 99 is out of range (sequence has 12 tokens)", "error")
        app.pump()
        await pilot.pause()
        assert any("out of range" in n.message for n in app._notifications)


@pytest.mark.parametrize("bad", ['{"seq": 0}\n', "not json\n"])
def test_replay_check_reports_bad_line_number(tmp_path, small_trace, bad):
    from click.testing import CliRunner

    from kvtui.commands.ui_commands import replay as replay_cmd
    from tests.helpers.synthetic import write_trace

    header, events = small_trace
    path = tmp_path / "t.jsonl"
    write_trace(path, header, events[:5])
    with open(path, "a") as out:
        out.write(bad)
        out.write('{"x": 1}\n')
    result = CliRunner().invoke(replay_cmd, [str(path), "--check"])
    assert result.exit_code != 0
    assert "line 7" in result.output


def test_replay_check_accepts_truncated_last_line(tmp_path, small_trace):
    from click.testing import CliRunner

    from kvtui.commands.ui_commands import replay as replay_cmd
    from tests.helpers.synthetic import write_trace

    header, events = small_trace
    path = tmp_path / "t.jsonl"
    write_trace(path, header, events[:5])
    with open(path, "a") as out:
        out.write('{"seq": 5, "t": 0.1, "ty')
    result = CliRunner().invoke(replay_cmd, [str(path), "--check"])
    assert result.exit_code == 0, result.output
    assert "5 events" in result.output and "the last line is incomplete" in result.output


async def test_replay_loads_a_file_in_a_worker_and_opens_at_an_interesting_point():
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "data" / "edit_series.jsonl"
    app = KvtuiApp(
        source=str(path), trace_path=str(path), open_interesting=True, clock=FakeClock(), frame_rate=None
    )
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.timeline is not None and app.loading is None
        assert app.cursor == len(app.timeline) and app.view.request_id == "memo"
        assert "500/500" in str(app.query_one("#status").render())


async def test_playing_skips_a_long_stretch_with_no_events_and_says_so(small_trace):
    header, events = small_trace
    # an 11 s prefill forward: nothing happens between event 40 and event 41
    slow = [dict(ev, t=ev["t"] + (11.0 if i > 40 else 0.0)) for i, ev in enumerate(events)]
    clock = FakeClock()
    app = replay_app((header, slow), clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+end")
        # opened at the end: the status says what space does
        assert "space: play from start" in app.status_text()
        # words, not U+23F8 (a glyph the browser's terminal font lacks)
        assert "⏸" not in app.status_text()
        await pilot.press("space")
        assert app.playing and app.cursor == 0
        for _ in range(40):
            clock.now += 0.1
            app.tick()
            if app.cursor > 41:
                break
        # within 4 s on screen, not 11: the gap was skipped, and the status line says by how much
        assert app.cursor > 41, app.cursor
        # all but the last second of trace time before the next event (kept so that the speed still counts)
        skipped = re.search(r"skipped ([\d.]+)s with no events", app.status_text())
        assert skipped and 9 < float(skipped.group(1)) < 11, app.status_text()
