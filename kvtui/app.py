"""KvtuiApp: the views of one trace, replayed from a file or streamed live from an engine thread.

The app holds a `Timeline` (events + keyframes) and a cursor: `self.state` is the `CacheState` after the first
`cursor` events. Replay moves the cursor (play, step, seek); live mode drains the `EventFeed` once per frame,
extends the timeline and follows its end unless the user scrubbed back. Time is injected (`clock`) and the
frame timer can be switched off (`frame_rate=None`) so tests pump `tick()` / `pump()` themselves.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Callable

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane

from kvtui.feed import Controller, EventFeed
from kvtui.loader import LoadedTrace, load_trace, read_header
from kvtui.opening import interesting_request, opening_cursor
from kvtui.screens.help import HelpScreen
from kvtui.screens.palette import KvtuiCommands
from kvtui.state import CacheState
from kvtui.timeline import Timeline
from kvtui.widgets.base import TextLine, View, update_if_changed
from kvtui.widgets.block_pool import BlockPoolView, block_details, edit_summary, pool_legend
from kvtui.widgets.block_table import BlockTableView
from kvtui.widgets.charts import ChartsView
from kvtui.widgets.miss import explain
from kvtui.widgets.radix_tree import RadixTreeView
from kvtui.widgets.ring import RingView
from kvtui.widgets.scrubber import Scrubber
from kvtui.widgets.timeline import TimelineView, latency_summary, request_summary
from kvtui.widgets.token_strip import TokenStrip

SPEEDS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0)
TABS = ("pool", "requests", "tree", "metrics", "rings", "tokens")
TAB_FOCUS = {"pool": "#pool-grid", "requests": "#lanes", "tree": "#radix", "metrics": "#charts",
             "rings": "#ring-view", "tokens": "#token-strip"}
FEED_BATCH = 50_000  # most items drained per frame: a backlog is caught up over several frames


class KvtuiApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "kvtui"
    COMMANDS = App.COMMANDS | {KvtuiCommands}
    BINDINGS = [
        Binding("question_mark", "help", "help", id="app.help"),
        Binding("q", "quit", "quit", id="app.quit"),
        Binding("1", "show_tab('pool')", "pool", show=False, id="tab.pool"),
        Binding("2", "show_tab('requests')", "requests", show=False, id="tab.requests"),
        Binding("3", "show_tab('tree')", "prefix tree", show=False, id="tab.tree"),
        Binding("4", "show_tab('metrics')", "metrics", show=False, id="tab.metrics"),
        Binding("5", "show_tab('rings')", "rings", show=False, id="tab.rings"),
        Binding("6", "show_tab('tokens')", "tokens", show=False, id="tab.tokens"),
        Binding("space", "toggle_play", "play/pause", id="replay.play"),
        Binding("full_stop", "step_event(1)", "event +1", show=False, id="replay.event_next"),
        Binding("comma", "step_event(-1)", "event -1", show=False, id="replay.event_prev"),
        Binding("greater_than_sign", "step_engine(1)", "step +1", show=False, id="replay.step_next"),
        Binding("less_than_sign", "step_engine(-1)", "step -1", show=False, id="replay.step_prev"),
        Binding("plus,equals_sign", "speed(1)", "faster", show=False, id="replay.faster"),
        Binding("minus", "speed(-1)", "slower", show=False, id="replay.slower"),
        Binding("g", "goto", "go to %", show=False, id="replay.goto"),
        Binding("ctrl+home", "seek_fraction(0)", "start of trace", show=False, id="replay.start"),
        Binding("ctrl+end,G", "seek_fraction(1)", "end of trace", show=False, id="replay.end"),
        Binding("a", "seek_marker('arrival', 1)", "next arrival", show=False, id="seek.arrival_next"),
        Binding("A", "seek_marker('arrival', -1)", "previous arrival", show=False, id="seek.arrival_prev"),
        Binding("e", "seek_marker('edit', 1)", "next edit", show=False, id="seek.edit_next"),
        Binding("E", "seek_marker('edit', -1)", "previous edit", show=False, id="seek.edit_prev"),
        Binding("x", "seek_marker('eviction', 1)", "next eviction", show=False, id="seek.eviction_next"),
        Binding("X", "seek_marker('eviction', -1)", "previous eviction", show=False, id="seek.eviction_prev"),
        Binding("m", "seek_marker('miss', 1)", "next miss", show=False, id="seek.miss_next"),
        Binding("M", "seek_marker('miss', -1)", "previous miss", show=False, id="seek.miss_prev"),
        Binding("left_square_bracket", "cycle_request(-1)", "prev request", show=False, id="request.prev"),
        Binding("right_square_bracket", "cycle_request(1)", "next request", show=False, id="request.next"),
        Binding("r", "begin_edit('replace')", "replace token", show=False, id="edit.replace"),
        Binding("i", "begin_edit('insert')", "insert token", show=False, id="edit.insert"),
        Binding("d", "delete_token", "delete token", show=False, id="edit.delete"),
        Binding("f", "fork", "fork request", show=False, id="edit.fork"),
        Binding("p", "focus_prompt", "prompt", show=False, id="live.prompt"),
        Binding("ctrl+t", "toggle_chat", "chat/plain prompt", show=False, id="live.chat"),
        Binding("F", "follow", "follow live", show=False, id="live.follow"),
        Binding("escape", "leave_input", "leave input", show=False, id="app.escape"),
    ]

    def __init__(self, timeline: Timeline | None = None, *, source: str = "", live: bool = False,
                 feed: EventFeed | None = None, controller: Controller | None = None,
                 clock: Callable[[], float] = time.monotonic, frame_rate: float | None = 30.0,
                 max_tokens: int = 64, notices: list[tuple[str, str]] | None = None,
                 trace_path: str | None = None, open_interesting: bool = False):
        super().__init__()
        self.timeline = timeline
        self.trace_path = trace_path  # replay: loaded in a thread worker, with progress (see load_worker)
        self.open_interesting = open_interesting
        self.loading: tuple[int, int, int] | None = None  # (bytes read, total, events) while loading
        self.source = source
        self.live = live
        self.feed = feed
        self.controller = controller or Controller()
        self.clock = clock
        self.frame_rate = frame_rate
        self.max_tokens = max_tokens
        self.startup_notices = notices or []
        self.state: CacheState | None = timeline.state_at(0) if timeline is not None and not live else None
        self.cursor = 0
        self.following = live
        self.playing = False
        self.speed = 1.0
        self.play_t = 0.0
        self.last_tick = clock()
        self.chat = live  # an instruct model answers a chat message; ctrl+t sends plain text instead
        self.view = View(self.state)
        self.input_mode: str | None = None  # "replace" | "insert" | "goto" while the small input is open
        self.token_position = 0
        self._select_next_arrival = False
        if live and timeline is not None:
            self.state = timeline.tip
            self.cursor = len(timeline)
        elif timeline is not None and open_interesting:
            self._open_at_interesting_point()

    def _open_at_interesting_point(self) -> None:
        self.cursor = opening_cursor(self.timeline)
        self.state = self.timeline.state_at(self.cursor)
        self.view.state = self.state
        self.view.request_id = interesting_request(self.state)

    def _block_cursor_to_request(self) -> None:
        """Put the pool cursor on the selected request's first block (held, or kept by the tree)."""
        state, rid = self.state, self.view.request_id
        if state is None or rid is None:
            return
        req = state.requests.get(rid)
        blocks = [p for p in state.tables.get(rid, ()) if p >= 0]
        if not blocks and req is not None:
            blocks = [p for _, p in state.cached_path(req.token_ids)]
        if blocks:
            self.query_one("#pool-grid", BlockPoolView).cursor = blocks[0]

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield TextLine(id="status")
        with TabbedContent(initial="pool", id="tabs"):
            with TabPane("1 Pool", id="pool"):
                yield TextLine(id="pool-legend")
                yield TextLine(id="edit-summary")
                yield BlockPoolView(id="pool-grid")
                with Horizontal(id="pool-bottom"):
                    yield BlockTableView(id="block-table")
                    yield TextLine(id="block-details")
            with TabPane("2 Requests", id="requests"):
                yield TextLine(id="latency")
                yield TextLine(id="request-summary")
                yield TimelineView(id="lanes")
            with TabPane("3 Prefix tree", id="tree"):
                yield RadixTreeView(id="radix")
                with VerticalScroll(id="miss-box"):
                    yield Static(id="miss")
            with TabPane("4 Metrics", id="metrics"):
                yield ChartsView(id="charts")
            with TabPane("5 Rings", id="rings"):
                yield RingView(id="ring-view")
            with TabPane("6 Tokens", id="tokens"):
                yield TokenStrip(id="token-strip")
        yield Input(id="small-input", classes="hidden")
        if self.live:
            yield Input(placeholder=self._prompt_placeholder(), id="prompt")
        yield Scrubber(id="scrubber")
        yield Footer()

    def on_mount(self) -> None:
        for severity, text in self.startup_notices:
            self.notify(text, severity=severity, timeout=10)
        if self.frame_rate:
            self.set_interval(1 / self.frame_rate, self.tick)
        if self.trace_path is not None and self.timeline is None:
            self.loading = (0, 1, 0)
            self.load_worker(self.trace_path)
        if self.state is not None and self.state.order and self.view.request_id is None:
            self.view.request_id = self.state.order[0]
        self._block_cursor_to_request()
        self.refresh_views()
        if self.live:
            self.query_one("#prompt", Input).focus()
        else:
            self.query_one("#pool-grid").focus()

    # ------------------------------------------------------------------ replay: loading a trace file
    class LoadProgress(Message):
        def __init__(self, done: int, total: int, events: int):
            super().__init__()
            self.done, self.total, self.events = done, total, events

    class Loaded(Message):
        def __init__(self, timeline: Timeline | None, loaded: LoadedTrace):
            super().__init__()
            self.timeline, self.loaded = timeline, loaded

    @work(thread=True, exclusive=True, group="load")
    def load_worker(self, path: str) -> None:
        """Parse and fold the trace off the UI thread; the status line shows progress meanwhile."""
        header, error = read_header(path)
        if header is None:
            self.post_message(self.Loaded(None, LoadedTrace(header={}, error=error)))
            return
        timeline = Timeline(header)
        loaded = load_trace(path, progress=lambda done, total, n: self.post_message(self.LoadProgress(done, total, n)),
                            on_batch=timeline.extend)
        self.post_message(self.Loaded(timeline, loaded))

    def on_kvtui_app_load_progress(self, message: LoadProgress) -> None:
        self.loading = (message.done, message.total, message.events)
        self.query_one("#status", TextLine).set(self.status_text())

    def on_kvtui_app_loaded(self, message: Loaded) -> None:
        self.loading = None
        loaded, source = message.loaded, self.source
        if loaded.error is not None:
            where = f"{source}, line {loaded.error.line}"
            self.notify(f"{where}: {loaded.error.message} - showing the {len(loaded.events)} events before it",
                        severity="error", timeout=10)
        if loaded.truncated_tail:
            self.notify(f"{source}: the last line is incomplete (the writer stopped mid-line); ignored",
                        severity="warning", timeout=6)
        if loaded.unknown_types:
            kinds = ", ".join(f"{k} ({n})" for k, n in sorted(loaded.unknown_types.items()))
            self.notify(f"event types this kvtui does not know were skipped: {kinds}", severity="warning",
                        timeout=6)
        if message.timeline is None:
            return
        self.timeline = message.timeline
        if self.open_interesting:
            self._open_at_interesting_point()
            self._block_cursor_to_request()
        else:
            self.state, self.cursor = self.timeline.state_at(0), 0
        self.refresh_views()

    # ------------------------------------------------------------------ frame loop
    def tick(self) -> None:
        """One frame: drain the live feed, advance playback. Tests call this with an injected clock."""
        now = self.clock()
        dt, self.last_tick = now - self.last_tick, now
        changed = self.pump() if self.feed is not None else False
        if self.playing and self.timeline is not None:
            self.play_t += dt * self.speed
            target = self.timeline.time_to_index(self.play_t, lo=self.cursor)
            if target >= len(self.timeline):
                target = len(self.timeline)
                self.playing = False
            if target != self.cursor:
                self.seek(target, refresh=False)
                changed = True
        if changed or self.playing:
            self.refresh_views()

    def pump(self) -> bool:
        """Drain the feed into the timeline (live mode). Returns whether anything changed."""
        items = self.feed.drain(FEED_BATCH)
        if not items:
            return False
        batch: list[dict] = []
        for kind, payload in items:
            if kind == "event":
                batch.append(payload)
            elif kind == "header":
                self._ingest(batch)
                batch = []
                self.timeline = Timeline(payload)
                self.state, self.cursor = self.timeline.tip, 0
            elif kind == "notice":
                self._ingest(batch)
                batch = []
                severity, text = payload
                self.notify(text, severity=severity, timeout=8 if severity == "error" else 4)
        self._ingest(batch)
        return True

    def _ingest(self, batch: list[dict]) -> None:
        if not batch or self.timeline is None:
            return
        self.timeline.extend(batch)
        if self._select_next_arrival:
            arrivals = [ev["request_id"] for ev in batch if ev["type"] == "request_arrived"]
            if arrivals:
                self.view.request_id = arrivals[-1]
                self._select_next_arrival = False
        if self.following:
            self.state, self.cursor = self.timeline.tip, len(self.timeline)

    # ------------------------------------------------------------------ cursor
    def seek(self, k: int, refresh: bool = True) -> None:
        tl = self.timeline
        if tl is None:
            return
        k = max(0, min(len(tl), k))
        if self.live and k == len(tl) and self.following:
            self.state = tl.tip
        elif self.state is not None and self.state is not tl.tip and 0 <= k - self.cursor <= tl.keyframe_every:
            self.state.apply_all(tl.events[self.cursor:k])  # forward: apply just the new events
        else:
            self.state = tl.state_at(k)
        self.cursor = k
        if refresh:
            self.refresh_views()

    def refresh_views(self) -> None:
        state = self.state
        view = self.view
        view.state = state
        if state is not None and (view.request_id is None or view.request_id not in state.requests):
            view.request_id = state.order[-1] if state.order and self.live else (state.order[0] if state.order
                                                                                  else None)
        self.query_one("#status", TextLine).set(self.status_text())
        tab = self.query_one("#tabs", TabbedContent).active
        if tab == "pool":
            grid = self.query_one("#pool-grid", BlockPoolView)
            view.block = grid.cursor
            self.query_one("#pool-legend", TextLine).set(pool_legend(state, view))
            self.query_one("#edit-summary", TextLine).set(edit_summary(state, view.request_id))
            self.query_one("#block-details", TextLine).set(block_details(state, grid.cursor))
            grid.update_view(view)
            self.query_one("#block-table", BlockTableView).update_view(view)
        elif tab == "requests":
            self.query_one("#latency", TextLine).set(latency_summary(state))
            self.query_one("#request-summary", TextLine).set(request_summary(view.request))
            self.query_one("#lanes", TimelineView).update_view(view)
        elif tab == "tree":
            self.query_one("#radix", RadixTreeView).update_view(view)
            update_if_changed(self.query_one("#miss", Static), explain(state, view.request))
        elif tab == "metrics":
            self.query_one("#charts", ChartsView).update_view(view)
        elif tab == "rings":
            self.query_one("#ring-view", RingView).update_view(view)
        elif tab == "tokens":
            self.query_one("#token-strip", TokenStrip).update_view(view)
        tl = self.timeline
        self.query_one("#scrubber", Scrubber).update_position(self.cursor, len(tl) if tl else 0,
                                                              tl.markers if tl else {})

    def status_text(self) -> str:
        tl, state = self.timeline, self.state
        mode = "LIVE" if self.live else "replay"
        source = self.source.rsplit("/", 1)[-1]
        if self.loading is not None:
            done, total, n = self.loading
            return f" loading {source}… {100 * done / max(1, total):.0f}% · {n:,} events"
        if tl is None or state is None:
            return (f" kvtui {mode} · {source} · waiting for the engine…" if self.live
                    else f" replay {source} · no trace loaded")
        if self.live:
            play = "following" if self.following else "paused (F: follow)"
        else:
            play = "▶" if self.playing else "⏸"
        last = state.last_event["type"] if state.last_event else "start"
        chat = " · chat" if self.live and self.chat else ""
        return (f" {mode} {source} {play} {self.speed:g}x · event {self.cursor}/{len(tl)} {last} · step "
                f"{max(state.step, 0)} · {state.t:.2f}s · {self.view.request_id or '-'}{chat}")

    # ------------------------------------------------------------------ replay actions
    def action_toggle_play(self) -> None:
        if self.timeline is None:
            return
        if self.cursor >= len(self.timeline) and not self.playing:
            self.seek(0)
        self.playing = not self.playing
        self.following = False
        self.play_t = self.state.t if self.state is not None and self.cursor else 0.0
        self.last_tick = self.clock()
        self.refresh_views()

    def action_step_event(self, delta: int) -> None:
        self.playing = self.following = False
        self.seek(self.cursor + delta)

    def action_step_engine(self, delta: int) -> None:
        """Jump to the end of the next (or previous) engine step: just after its `step` event."""
        if self.timeline is None:
            return
        self.playing = self.following = False
        if delta > 0:
            target = self.timeline.next_marker("step", self.cursor)
        else:
            target = self.timeline.prev_marker("step", self.cursor)
        self.seek(target if target is not None else (len(self.timeline) if delta > 0 else 0))

    def action_seek_fraction(self, fraction: float) -> None:
        if self.timeline is not None:
            self.playing = self.following = False
            self.seek(round(fraction * len(self.timeline)))

    def action_seek_marker(self, kind: str, direction: int) -> None:
        if self.timeline is None:
            return
        target = (self.timeline.next_marker(kind, self.cursor) if direction > 0
                  else self.timeline.prev_marker(kind, self.cursor))
        if target is None:
            self.notify(f"no {'next' if direction > 0 else 'previous'} {kind}", timeout=2)
            return
        self.playing = self.following = False
        self.seek(target)
        event = self.timeline.events[target - 1]
        if "request_id" in event:
            self.view.request_id = event["request_id"]
            self.refresh_views()

    def action_speed(self, direction: int) -> None:
        i = min(range(len(SPEEDS)), key=lambda j: abs(SPEEDS[j] - self.speed))
        self.speed = SPEEDS[max(0, min(len(SPEEDS) - 1, i + direction))]
        self.refresh_views()

    def action_follow(self) -> None:
        if self.live and self.timeline is not None:
            self.following = True
            self.playing = False
            self.seek(len(self.timeline))

    def action_goto(self) -> None:
        self._open_input("goto", "go to: a percentage (50 or 50%) or an event number (#1234); Enter")

    def on_scrubber_seek(self, message: Scrubber.Seek) -> None:
        self.playing = self.following = False
        self.seek(message.index)

    # ------------------------------------------------------------------ selection
    def action_show_tab(self, tab: str) -> None:
        self.query_one("#tabs", TabbedContent).active = tab
        self.query_one(TAB_FOCUS[tab]).focus()
        self.refresh_views()

    def on_tabbed_content_tab_activated(self, _message) -> None:
        self.refresh_views()

    def action_cycle_request(self, delta: int) -> None:
        state = self.state
        if state is None or not state.order:
            return
        rid = self.view.request_id
        i = state.order.index(rid) if rid in state.requests else -1
        self.select_request(state.order[(i + delta) % len(state.order)])

    def select_request(self, request_id: str) -> None:
        if request_id != self.view.request_id:
            self.view.request_id = request_id
            self.query_one("#token-strip", TokenStrip).cursor = None  # the last token
        self.refresh_views()

    def on_radix_tree_view_node_selected(self, message: RadixTreeView.NodeSelected) -> None:
        self.view.node_id = message.node_id
        if message.show_pool:
            self.action_show_tab("pool")
        else:
            self.refresh_views()

    def on_block_pool_view_block_selected(self, message: BlockPoolView.BlockSelected) -> None:
        if message.request_id is not None:
            self.view.request_id = message.request_id
        self.refresh_views()

    def on_timeline_view_request_selected(self, message: TimelineView.RequestSelected) -> None:
        self.select_request(message.request_id)

    def on_token_strip_cursor_moved(self, message: TokenStrip.CursorMoved) -> None:
        self.token_position = message.position
        self.query_one("#token-strip", TokenStrip).refresh()

    # ------------------------------------------------------------------ live: prompt, edits, fork
    def action_focus_prompt(self) -> None:
        if self.live:
            self.query_one("#prompt", Input).focus()

    def _prompt_placeholder(self) -> str:
        if self.chat:
            return "chat message (through the chat template), Enter to send (ctrl+t: plain text; Esc: leave)"
        return "plain text prompt, Enter to send (ctrl+t: chat message; Esc: leave)"

    def action_toggle_chat(self) -> None:
        self.chat = not self.chat
        if self.live:
            prompt = self.query_one("#prompt", Input)
            prompt.placeholder = self._prompt_placeholder()
        self.notify("chat mode: prompts go through the chat template" if self.chat else "plain prompt mode",
                    timeout=2)
        self.refresh_views()

    def _require_live(self, what: str) -> bool:
        if not self.live:
            self.notify(f"{what} needs live mode (kvtui live); this is a replay", severity="warning", timeout=3)
            return False
        if self.view.request is None:
            self.notify(f"{what}: no request selected", severity="warning", timeout=3)
            return False
        return True

    def action_begin_edit(self, kind: str) -> None:
        if not self._require_live(f"{kind} a token"):
            return
        self.action_show_tab("tokens")
        req = self.view.request
        pos = self.query_one("#token-strip", TokenStrip).position()
        what = f"replace {req.texts[pos]!r} at position {pos}" if kind == "replace" else \
            f"insert before position {pos} ({req.texts[pos]!r})"
        self._open_input(kind, f"{what} with this text; Enter applies, Esc cancels")

    def action_delete_token(self) -> None:
        if not self._require_live("delete a token"):
            return
        req = self.view.request
        pos = self.query_one("#token-strip", TokenStrip).position()
        self.controller.edit(req.request_id, pos, "", "delete")
        self.notify(f"delete position {pos} of {req.request_id}", timeout=2)

    def action_fork(self) -> None:
        if not self._require_live("fork"):
            return
        self.controller.fork(self.view.request_id, 1)
        self._select_next_arrival = True

    def _open_input(self, mode: str, placeholder: str) -> None:
        small = self.query_one("#small-input", Input)
        self.input_mode = mode
        small.value = ""
        small.placeholder = placeholder
        small.remove_class("hidden")
        small.focus()

    def _close_input(self) -> None:
        small = self.query_one("#small-input", Input)
        small.add_class("hidden")
        self.input_mode = None
        tab = self.query_one("#tabs", TabbedContent).active
        self.query_one(TAB_FOCUS.get(tab, "#pool-grid")).focus()

    def action_leave_input(self) -> None:
        if self.input_mode is not None:
            self._close_input()
        elif isinstance(self.focused, Input):
            tab = self.query_one("#tabs", TabbedContent).active
            self.query_one(TAB_FOCUS.get(tab, "#pool-grid")).focus()

    def on_input_submitted(self, message: Input.Submitted) -> None:
        text = message.value
        if message.input.id == "prompt":
            if not text.strip():
                return
            prompt = [{"role": "user", "content": text}] if self.chat else text
            self.controller.submit(prompt, self.max_tokens)
            self._select_next_arrival = True
            message.input.value = ""
            return
        mode = self.input_mode
        self._close_input()
        if mode == "goto":
            self._goto(text.strip())
        elif mode in ("replace", "insert") and self.view.request is not None:
            if not text:
                self.notify("nothing to insert: type the new text", severity="warning", timeout=3)
                return
            pos = self.query_one("#token-strip", TokenStrip).position()
            self.controller.edit(self.view.request_id, pos, text, mode)

    def _goto(self, text: str) -> None:
        if self.timeline is None or not text:
            return
        try:
            if text.startswith("#"):
                target = int(text[1:])
            else:
                target = round(float(text.rstrip("%")) / 100 * len(self.timeline))
        except ValueError:
            self.notify(f"not a percentage or #event: {text!r}", severity="error", timeout=4)
            return
        self.playing = self.following = False
        self.seek(target)

    # ------------------------------------------------------------------ help and palette
    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.keys_markdown()))

    def command_entries(self):
        """(binding, callback) for every binding of the app and its views: the command palette's registry."""
        entries = []
        for binding in self.BINDINGS:
            entries.append((binding, partial(self.run_action, binding.action)))
        for selector, cls in (("#pool-grid", BlockPoolView), ("#radix", RadixTreeView), ("#lanes", TimelineView),
                              ("#token-strip", TokenStrip)):
            for binding in cls.BINDINGS:
                entries.append((binding, partial(self._run_widget_action, selector, binding.action)))
        return entries

    async def _run_widget_action(self, selector: str, action: str) -> None:
        await self.run_action(action, self.query_one(selector))

    def keys_markdown(self) -> str:
        rows = ["| key | what | id |", "|---|---|---|"]
        for binding, _ in self.command_entries():
            rows.append(f"| `{binding.key}` | {binding.description} | {binding.id} |")
        return "\n".join(rows)

    def on_unmount(self) -> None:
        self.controller.stop()

