"""KvtuiApp: the views of one trace, replayed from a file or streamed live from an engine thread.

The app holds a `Timeline` (events + keyframes) and a cursor: `self.state` is the `CacheState` after the first
`cursor` events. Replay moves the cursor (play, step, seek); live mode drains the `EventFeed` once per frame,
extends the timeline and follows its end unless the user scrubbed back. Time is injected (`clock`) and the
frame timer can be switched off (`frame_rate=None`) so tests pump `tick()` / `pump()` themselves.

This module holds the layout, the frame loop, redrawing the views, the small input and help; the roles live in
mixins: loading.py (a trace file), playback.py (replay controls), live.py (engine feed, prompt, edits),
selection.py (tabs and requests).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Input, TabbedContent, TabPane

from kvtui.app.feed import Controller, EventFeed
from kvtui.app.live import LIVE_BINDINGS, LIVE_ONLY_ACTIONS, LiveMixin
from kvtui.app.loading import LoadingMixin
from kvtui.app.playback import PLAYBACK_BINDINGS, PlaybackMixin
from kvtui.app.selection import SelectionMixin
from kvtui.app.status import status_line
from kvtui.app.tabs import TABS, Tab, tab_bindings, tab_label
from kvtui.screens.help import HelpScreen, help_markdown, trace_notes
from kvtui.screens.palette import KvtuiCommands, own_bindings
from kvtui.screens.panel import PanelScreen
from kvtui.state import CacheState
from kvtui.state.opening import interesting_request, opening_cursor
from kvtui.state.timeline import Timeline
from kvtui.widgets.base import TextLine, View
from kvtui.widgets.block_pool import BlockPoolView
from kvtui.widgets.block_table import kept_blocks
from kvtui.widgets.prompt_bar import PromptBar
from kvtui.widgets.scrubber import Scrubber

# terminal rows under which the prompt bar takes one row instead of three
COMPACT_BELOW_ROWS = 30


class KvtuiApp(LoadingMixin, PlaybackMixin, LiveMixin, SelectionMixin, App):
    CSS_PATH = "app.tcss"
    TITLE = "kvtui"
    COMMANDS = App.COMMANDS | {KvtuiCommands}
    BINDINGS = [
        Binding("question_mark", "help", "help", id="app.help"),
        Binding("q", "quit", "quit", id="app.quit"),
        *tab_bindings(),
        Binding("k", "show_panel('mask')", "attention masks of the step", show=False, id="panel.mask"),
        Binding("l", "show_panel('roofline')", "prefill vs decode roofline", show=False, id="panel.roofline"),
        *PLAYBACK_BINDINGS,
        Binding("left_square_bracket", "cycle_request(-1)", "prev request", show=False, id="request.prev"),
        Binding("right_square_bracket", "cycle_request(1)", "next request", show=False, id="request.next"),
        *LIVE_BINDINGS,
        Binding("escape", "leave_input", "leave input", show=False, id="app.escape"),
    ]

    def __init__(
        self,
        timeline: Timeline | None = None,
        *,
        source: str = "",
        live: bool = False,
        feed: EventFeed | None = None,
        controller: Controller | None = None,
        clock: Callable[[], float] = time.monotonic,
        frame_rate: float | None = 30.0,
        max_tokens: int = 64,
        notices: list[tuple[str, str]] | None = None,
        trace_path: str | None = None,
        open_interesting: bool = False,
    ):
        super().__init__()
        self.timeline = timeline
        # replay: loaded in a thread worker, with progress (see load_worker)
        self.trace_path = trace_path
        self.open_interesting = open_interesting
        # (bytes read, total, events) while loading
        self.loading: tuple[int, int, int] | None = None
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
        # an instruct model answers a chat message; ctrl+t sends plain text instead
        self.chat = live
        self.view = View(self.state)
        # "replace" | "insert" | "goto" while the small input is open
        self.input_mode: str | None = None
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
            blocks = [k.physical for k in kept_blocks(state, req)]
        if blocks:
            self.query_one("#pool-grid", BlockPoolView).cursor = blocks[0]

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield TextLine(id="status")
        with TabbedContent(initial="pool", id="tabs"):
            for tab_id, tab in TABS.items():
                with TabPane(tab_label(tab_id), id=tab_id):
                    yield from tab.compose()
        yield TextLine(id="edit-preview", classes="hidden")
        yield Input(id="small-input", classes="hidden", select_on_focus=False)
        if self.live:
            yield PromptBar(max_tokens=self.max_tokens, chat=self.chat, id="prompt-bar")
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
        # the views have the keys at start (`p` opens the prompt box, as the box's placeholder says)
        self.query_one("#pool-grid").focus()

    def on_resize(self, _event) -> None:
        # a short terminal gets the one-row prompt box (app.tcss), and the status line refits
        self.screen_stack[0].set_class(self.size.height < COMPACT_BELOW_ROWS, "compact")
        self.call_after_refresh(self.refresh_views)

    # ------------------------------------------------------------------ frame loop and drawing
    def tick(self) -> None:
        """One frame: drain the live feed, advance playback. Tests call this with an injected clock."""
        now = self.clock()
        dt, self.last_tick = now - self.last_tick, now
        changed = self.pump() if self.feed is not None else False
        if self.playing and self.timeline is not None:
            self.play_t += dt * self.speed
            self._skip_idle()
            target = self.timeline.time_to_index(self.play_t, lo=self.cursor)
            if target >= len(self.timeline):
                target = len(self.timeline)
                self.playing = False
            if target != self.cursor:
                self.seek(target, refresh=False)
                changed = True
        if changed or self.playing:
            self.refresh_views()

    def refresh_views(self) -> None:
        state = self.state
        view = self.view
        view.state = state
        if state is not None and (view.request_id is None or view.request_id not in state.requests):
            view.request_id = (
                state.order[-1] if state.order and self.live else (state.order[0] if state.order else None)
            )
        # a panel covers the tabs: draw only it
        if isinstance(self.screen, PanelScreen):
            self.screen.update_view(
                view, self.timeline.events if self.timeline else [], self.status_text(self.size.width)
            )
            return
        self.query_one("#status", TextLine).set(self.status_text(self.size.width))
        tab = TABS.get(self.query_one("#tabs", TabbedContent).active)
        if tab is not None:
            tab.update(self, state, view)
        tl = self.timeline
        self.query_one("#scrubber", Scrubber).update_position(
            self.cursor, len(tl) if tl else 0, tl.markers if tl else {}
        )

    def status_text(self, width: int | None = None) -> str:
        return status_line(self, width)

    # ------------------------------------------------------------------ the small input (go to, replace, insert)
    def _open_input(self, mode: str, placeholder: str, value: str = "") -> None:
        # an input opened under a panel (k, l) would take the keys out of sight: the panel goes first
        if isinstance(self.screen, PanelScreen):
            self.screen.dismiss()
        small = self.query_one("#small-input", Input)
        self.input_mode = mode
        small.value = value
        small.cursor_position = len(value)
        small.placeholder = placeholder
        small.remove_class("hidden")
        small.focus()
        if mode in ("replace", "insert"):
            self.query_one("#edit-preview", TextLine).remove_class("hidden")
            self._preview_edit(value)

    def _close_input(self) -> None:
        small = self.query_one("#small-input", Input)
        small.add_class("hidden")
        self.query_one("#edit-preview", TextLine).add_class("hidden")
        self.input_mode = None
        self.focus_tab()

    def on_input_changed(self, message: Input.Changed) -> None:
        if message.input.id == "small-input" and self.input_mode in ("replace", "insert"):
            self._preview_edit(message.value)

    def action_leave_input(self) -> None:
        if self.input_mode is not None:
            self._close_input()
        elif isinstance(self.focused, Input):
            self.focus_tab()

    def on_input_submitted(self, message: Input.Submitted) -> None:
        text = message.value
        mode = self.input_mode
        self._close_input()
        if mode == "goto":
            self._goto(text.strip())
        elif mode in ("replace", "insert"):
            self._edit_text(mode, text)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # the footer shows `h hold` in live mode only, and a replay has no engine to hold
        if action in LIVE_ONLY_ACTIONS and not self.live:
            return False
        return True

    # ------------------------------------------------------------------ panels, help and palette
    def action_show_panel(self, kind: str) -> None:
        # the same key closes it; the other panel's key swaps
        if isinstance(self.screen, PanelScreen):
            shown = self.screen.kind
            self.screen.dismiss()
            if shown == kind:
                return
        self.push_screen(PanelScreen(kind), callback=lambda _: self.refresh_views())
        self.call_after_refresh(self.refresh_views)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.help_text()))

    def shown_tabs(self) -> list[tuple[int, str, Tab]]:
        """(key, tab id, tab) of the tabs this trace shows (the what-if tab only for a what-if trace)."""
        tabs = self.query_one("#tabs", TabbedContent)
        return [
            (n, tab_id, tab)
            for n, (tab_id, tab) in enumerate(TABS.items(), 1)
            if tabs.get_tab(tab_id).display
        ]

    def view_bindings(self) -> list[tuple[int, str, Tab, list[Binding]]]:
        """(key, tab id, tab, bindings) of each tab whose main view has keys of its own."""
        out = []
        for n, (tab_id, tab) in enumerate(TABS.items(), 1):
            bindings = own_bindings(type(self.query_one(tab.view)))
            if bindings:
                out.append((n, tab_id, tab, bindings))
        return out

    def key_groups(self) -> list[tuple[str, list[Binding]]]:
        """Every key of every screen, grouped as the help lists them."""
        grouped = {id(b) for b in (*PLAYBACK_BINDINGS, *LIVE_BINDINGS)}
        shown = {tab_id for _, tab_id, _ in self.shown_tabs()}
        hidden = [f"`{n}`" for n, tab_id in enumerate(TABS, 1) if tab_id not in shown]
        everywhere = "Everywhere" + (f" ({', '.join(hidden)}: no such tab in this trace)" if hidden else "")
        groups = [
            (everywhere, [b for b in self.BINDINGS if id(b) not in grouped]),
            ("Replay: play, step and seek", PLAYBACK_BINDINGS),
            (
                "Live mode (kvtui live)" + ("" if self.live else ": this is a replay, they only say so"),
                LIVE_BINDINGS,
            ),
        ]
        groups += [
            (f"Tab {n} {tab.title}", bindings)
            for n, tab_id, tab, bindings in self.view_bindings()
            if tab_id in shown
        ]
        groups += [
            ("Panels (k masks, l roofline)", own_bindings(PanelScreen)),
            ("This help", own_bindings(HelpScreen)),
        ]
        return groups

    def help_text(self) -> str:
        """The help's Markdown, for this app and this trace."""
        tabs = [(n, tab_id, tab.title, tab.help) for n, tab_id, tab in self.shown_tabs()]
        return help_markdown(tabs, trace_notes(self.state), self.key_groups())

    def command_entries(self):
        """(binding, callback) for every binding of the app and its views: the command palette's registry."""
        entries = []
        for binding in self.BINDINGS:
            entries.append((binding, partial(self.run_action, binding.action)))
        for _n, _tab_id, tab, bindings in self.view_bindings():
            for binding in bindings:
                entries.append((binding, partial(self._run_widget_action, tab.view, binding.action)))
        return entries

    async def _run_widget_action(self, selector: str, action: str) -> None:
        await self.run_action(action, self.query_one(selector))

    def on_unmount(self) -> None:
        # the live engine: stops after the step in flight, closes its trace, joins
        self.controller.stop()
