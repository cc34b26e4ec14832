"""FleetApp: the views of an attached vLLM / SGLang fleet, live (`kvtui attach`) or replayed from an attach trace
(`kvtui replay fleet.jsonl`): the same `FleetState` reducer folds both, so a recording shows what was seen.

Tabs: 1 fleet (one row per worker), 2 prefix tree (block hashes, tokens, holders), 3 explain (a prompt against
every worker's cache). Live, each frame drains the `EventFeed` within a time budget (a flood of events is
caught up over several frames, the UI stays responsive) and shows the attacher's notices.
"""

from __future__ import annotations

import gc
import time
from collections import deque

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane

from kvtui.feed import EventFeed
from kvtui.state.fleet import FleetState, replay_fleet
from kvtui.state.fleet_explain import QueryError, explain_prompt, parse_query
from kvtui.widgets.base import TextLine, update_if_changed
from kvtui.widgets.fleet_table import FleetTableView
from kvtui.widgets.fleet_tree import FleetTreeView

FRAME_BUDGET = 0.015  # seconds of each frame spent folding events in (the rest draws)
CHUNK = 64  # feed items per drain: an item is an event or a list of them
SLICE = 256  # events folded between two looks at the clock
TREE_EVERY = 1.0  # seconds between prefix-tree rebuilds while events flow


class FeedBatcher:
    """A TraceSink listener that hands events to the feed a list at a time (the attacher flushes it after each
    few messages): one queue operation per batch instead of per event."""

    def __init__(self, feed: EventFeed):
        self.feed = feed
        self.buffer: list[dict] = []

    def __call__(self, event: dict) -> None:
        self.buffer.append(event)

    def flush(self) -> None:
        if self.buffer:
            self.feed.put("events", self.buffer)
            self.buffer = []


class FleetApp(App):
    TITLE = "kvtui attach"
    CSS = """
    #fleet-status { height: 1; background: $panel; }
    FleetTableView, FleetTreeView { height: 1fr; }
    #explain-input { dock: top; }
    """
    BINDINGS = [
        Binding("q", "quit", "quit", id="fleet.quit"),
        Binding("1", "show_tab('fleet')", "fleet", id="fleet.tab.fleet"),
        Binding("2", "show_tab('tree')", "prefix tree", id="fleet.tab.tree"),
        Binding("3", "show_tab('explain')", "explain a prompt", id="fleet.tab.explain"),
        Binding("g", "goto", "go to % (replay)", id="fleet.goto"),
        Binding("escape", "leave_input", "leave input", show=False, id="fleet.escape"),
    ]

    def __init__(self, *, source: str = "", feed: EventFeed | None = None, attacher=None, tokenizer=None,
                 duration: float | None = None, header: dict | None = None, events: list[dict] | None = None,
                 frame_rate: float | None = 30.0):
        super().__init__()
        self.source = source
        self.feed = feed
        self.attacher = attacher
        self.tokenizer = tokenizer
        self.duration = duration
        self.frame_rate = frame_rate
        self.events = events  # replay: the whole trace
        self.fleet: FleetState | None = None
        self.cursor = 0
        self.started = time.monotonic()
        self._tree_at = 0.0
        self._pending: deque[list[dict]] = deque()  # received, not yet folded (over a frame's budget)
        self._goto_open = False
        if events is not None:
            self.fleet = replay_fleet(header, events)
            self.cursor = len(events)

    def compose(self) -> ComposeResult:
        yield TextLine(id="fleet-status")
        with TabbedContent(initial="fleet", id="fleet-tabs"):
            with TabPane("1 Fleet", id="fleet"):
                yield FleetTableView(id="fleet-table")
            with TabPane("2 Prefix tree", id="tree"):
                yield FleetTreeView(id="fleet-tree")
            with TabPane("3 Explain", id="explain"):
                yield Input(placeholder="prompt: token ids (1 2 3) or text with --tokenizer; options: "
                                        "salt=S lora=L group=G | prompt", id="explain-input")
                with VerticalScroll():
                    yield Static(id="explain-out")
        yield Input(id="goto-input")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#goto-input").display = False
        self.query_one("#fleet-table").focus()
        if self.frame_rate:
            self.set_interval(1 / self.frame_rate, self.tick)
        self.refresh_views(force=True)

    # ------------------------------------------------------------------ live
    def tick(self) -> None:
        changed = self.pump()
        gc.freeze()  # what survived is long-lived (events, blocks): collections scan only what came since
        if self.attacher is not None:
            while not self.attacher.notices.empty():
                severity, text = self.attacher.notices.get()
                self.notify(text, severity=severity, timeout=6)
        if self.duration is not None and time.monotonic() - self.started >= self.duration:
            self.exit()
        if changed or (self.attacher is not None and self.fleet is not None):
            self.refresh_views()  # live: rates decay while nothing arrives

    def pump(self, budget: float = FRAME_BUDGET) -> bool:
        """Fold queued events in, SLICE at a time, until the frame budget is spent; the rest waits for the next
        frame. Returns whether anything changed."""
        if self.feed is None:
            return False
        deadline = time.perf_counter() + budget
        changed = False
        pending = self._pending
        while time.perf_counter() < deadline:
            if not pending:
                items = self.feed.drain(CHUNK)
                if not items:
                    break
                for kind, payload in items:
                    if kind == "events":
                        pending.append(payload)
                    elif kind == "event":
                        pending.append([payload])
                    elif kind == "header":
                        self._fold_pending()
                        self.fleet, self.cursor = FleetState(payload), 0
                    elif kind == "notice":
                        severity, text = payload
                        self.notify(text, severity=severity)
                continue
            events = pending.popleft()
            if len(events) > SLICE:
                pending.appendleft(events[SLICE:])
                events = events[:SLICE]
            self._fold(events)
            changed = True
        return changed

    def _fold_pending(self) -> None:
        while self._pending:
            self._fold(self._pending.popleft())

    def _fold(self, events: list[dict]) -> None:
        if self.fleet is None:
            self.fleet = FleetState({})
        self.fleet.apply_all(events)
        self.cursor += len(events)

    # ------------------------------------------------------------------ drawing
    def refresh_views(self, force: bool = False) -> None:
        if self.fleet is not None and self.attacher is not None:
            self.fleet.now = max(self.fleet.t, self.attacher.sink.now())
        self.query_one("#fleet-status", TextLine).set(self.status_text())
        tab = self.query_one("#fleet-tabs", TabbedContent).active
        if tab == "fleet":
            self.query_one("#fleet-table", FleetTableView).update_fleet(self.fleet)
        elif tab == "tree":
            now = time.monotonic()
            if force or now - self._tree_at >= TREE_EVERY or self.feed is None:
                self._tree_at = now
                self.query_one("#fleet-tree", FleetTreeView).update_fleet(self.fleet, force=force)

    def status_text(self) -> str:
        fleet = self.fleet
        mode = "LIVE attach" if self.feed is not None else "replay"
        if fleet is None:
            return f" {mode} · waiting for events…"
        total = f"/{len(self.events)}" if self.events is not None else ""
        return (f" {mode} {self.source} · event {self.cursor}{total} · {fleet.t:.2f}s · "
                f"{len(fleet.workers)} workers · {len(fleet.nodes):,} blocks known")

    def action_show_tab(self, tab: str) -> None:
        self.query_one("#fleet-tabs", TabbedContent).active = tab
        if tab == "explain":
            self.query_one("#explain-input", Input).focus()
        self.refresh_views(force=True)

    def on_tabbed_content_tab_activated(self, _message) -> None:
        self.refresh_views(force=True)

    # ------------------------------------------------------------------ explain and go to
    def on_input_submitted(self, message: Input.Submitted) -> None:
        if message.input.id == "goto-input":
            self._goto(message.value)
            return
        update_if_changed(self.query_one("#explain-out", Static), self.explain_text(message.value))

    def explain_text(self, text: str) -> str:
        if self.fleet is None:
            return "no events yet"
        try:
            ids, options = parse_query(text, self.tokenizer)
        except QueryError as exc:
            return f"cannot explain: {exc}"
        results = explain_prompt(self.fleet, ids, **options)
        lines = [f"{len(ids)} prompt tokens against {len(results)} workers (matched by the token ids each "
                 "stored block carries; hashes are never recomputed):", ""]
        lines += [r["message"] for r in sorted(results, key=lambda r: -r["matched_tokens"])]
        return "\n".join(lines)

    def action_goto(self) -> None:
        if self.events is None:
            self.notify("go to: only in a replay", severity="warning", timeout=3)
            return
        box = self.query_one("#goto-input", Input)
        box.display = True
        box.placeholder = "go to what % of the trace (0-100); Enter"
        box.value = ""
        box.focus()

    def _goto(self, text: str) -> None:
        self.action_leave_input()
        try:
            percent = float(text)
        except ValueError:
            self.notify(f"not a percentage: {text!r}", severity="warning", timeout=3)
            return
        k = round(len(self.events) * max(0.0, min(100.0, percent)) / 100)
        self.fleet = replay_fleet(self.fleet.header if self.fleet else {}, self.events[:k])
        self.cursor = k
        self.refresh_views(force=True)

    def action_leave_input(self) -> None:
        self.query_one("#goto-input", Input).display = False
        tab = self.query_one("#fleet-tabs", TabbedContent).active
        self.query_one("#fleet-tree" if tab == "tree" else "#fleet-table").focus()
