"""FleetApp: the views of an attached vLLM / SGLang fleet, live (`kvtui attach`) or replayed from an attach trace
(`kvtui replay fleet.jsonl`): the same `FleetState` reducer folds both, so a recording shows what was seen.

Tabs: 1 fleet (one row per worker), 2 prefix tree (block hashes, tokens, holders), 3 explain (a prompt against
every worker's cache). The views draw `FleetView`s (plain data, kvtui/state/fleet_view.py). Where they come from:
  collector  `kvtui attach`: a collector process (kvtui/sources/collector.py) receives and folds the stream;
             each frame takes the latest view it sent and asks for the next, never waiting for one;
  feed       events emitted on another thread of this process, handed over in lists through an `EventFeed`
             and folded here within a frame budget (tests, small streams);
  replay     the whole trace, folded once (`g` goes to a percentage of it).
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
from kvtui.state.fleet_explain import QueryError, parse_query
from kvtui.state.fleet_view import FleetView, explain_text, fleet_view
from kvtui.widgets.base import TextLine, update_if_changed
from kvtui.widgets.fleet_table import FleetTableView
from kvtui.widgets.fleet_tree import FleetTreeView

FRAME_BUDGET = 0.015  # feed: seconds of each frame spent folding events in (the rest draws)
CHUNK = 64  # feed items per drain: an item is an event or a list of them
SLICE = 256  # events folded between two looks at the clock
TREE_EVERY = 1.0  # seconds between prefix-tree rebuilds while events flow
VIEW_EVERY = 0.1  # seconds between two views asked of the collector (a person reads ten a second at most)


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

    def __init__(self, *, source: str = "", collector=None, feed: EventFeed | None = None, attacher=None,
                 tokenizer=None, duration: float | None = None, header: dict | None = None,
                 events: list[dict] | None = None, frame_rate: float | None = 30.0):
        super().__init__()
        self.source = source
        self.collector = collector  # a CollectorClient (live `kvtui attach`)
        self.feed = feed
        self.attacher = attacher  # feed mode: its notices and clock
        self.tokenizer = tokenizer  # text prompts to token ids for the explainer
        self.duration = duration
        self.frame_rate = frame_rate
        self.events = events  # replay: the whole trace
        self.live = collector is not None or feed is not None
        self.fleet: FleetState | None = None  # replay and feed: folded here
        self.view: FleetView | None = None  # what the views show
        self.started = time.monotonic()
        self._tree_at = 0.0
        self._pending: deque[list[dict]] = deque()  # received, not yet folded (over a frame's budget)
        self._dead_told = False
        self._asked_at = 0.0
        if events is not None:
            self.fleet = replay_fleet(header, events)

    @property
    def cursor(self) -> int:
        """Events folded so far (here, or by the collector)."""
        if self.fleet is not None:
            return self.fleet.index
        return self.view.index if self.view is not None else 0

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
        # the app as built is long-lived: collections then scan only what frames make (one full scan of it
        # took a frame past 33 ms while a collector kept the other core busy)
        gc.freeze()
        if self.frame_rate:
            self.set_interval(1 / self.frame_rate, self.tick)
        self.refresh_views(force=True)

    # ------------------------------------------------------------------ live
    def tick(self) -> None:
        if not self.is_running:
            return  # a timer that fires while the app shuts down
        if self.collector is not None:
            changed = self._from_collector()
        else:
            changed = self.pump()
            gc.freeze()  # what survived is long-lived (events, blocks): collections scan only what came since
        if self.attacher is not None:
            while not self.attacher.notices.empty():
                severity, text = self.attacher.notices.get()
                self.notify(text, severity=severity, timeout=6)
        if self.duration is not None and time.monotonic() - self.started >= self.duration:
            self.exit()
        if changed or (self.live and self.fleet is not None):
            self.refresh_views()  # feed: rates decay while nothing arrives

    def _from_collector(self) -> bool:
        """Take what the collector sent; ask for the next view (with the tree when that tab is due)."""
        collector = self.collector
        changed = False
        for message in collector.poll():
            if message[0] == "view":
                changed = True
            elif message[0] == "explained":
                update_if_changed(self.query_one("#explain-out", Static), message[1])
            elif message[0] == "notice":
                self.notify(message[2], severity=message[1], timeout=6)
        if collector.dead is not None and not self._dead_told:
            self._dead_told = True
            self.notify(f"{collector.dead}: the views stop here", severity="error", timeout=30)
        now = time.monotonic()
        if now - self._asked_at >= VIEW_EVERY:
            self._asked_at = now
            collector.ask(with_tree=self._tree_due())
        return changed

    def _tree_due(self) -> bool:
        return self.query_one("#fleet-tabs", TabbedContent).active == "tree" and \
            time.monotonic() - self._tree_at >= TREE_EVERY

    def pump(self, budget: float = FRAME_BUDGET) -> bool:
        """Feed mode: fold queued events in, SLICE at a time, until the frame budget is spent; the rest waits
        for the next frame. Returns whether anything changed."""
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
                        self.fleet = FleetState(payload)
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

    # ------------------------------------------------------------------ drawing
    def refresh_views(self, force: bool = False) -> None:
        tab = self.query_one("#fleet-tabs", TabbedContent).active
        if self.fleet is not None:  # folded here: build the view
            if self.attacher is not None:
                self.fleet.now = max(self.fleet.t, self.attacher.sink.now())
            tree = tab == "tree" and (force or not self.live or time.monotonic() - self._tree_at >= TREE_EVERY)
            self.view = fleet_view(self.fleet, tree=tree)
        elif self.collector is not None:
            self.view = self.collector.view
        view = self.view
        self.query_one("#fleet-status", TextLine).set(self.status_text())
        if tab == "fleet":
            self.query_one("#fleet-table", FleetTableView).update_fleet(view)
        elif tab == "tree" and view is not None and view.tree is not None:
            self._tree_at = time.monotonic()
            self.query_one("#fleet-tree", FleetTreeView).update_fleet(view)

    def status_text(self) -> str:
        view = self.view
        mode = "LIVE attach" if self.live else "replay"
        if view is None:
            return f" {mode} · waiting for events…"
        total = f"/{len(self.events)}" if self.events is not None else ""
        behind = ""
        if self.collector is not None and self.collector.counters:
            c = self.collector.counters
            behind = f" · {c['blocks']:,} block hashes received"
        return (f" {mode} {self.source} · event {view.index:,}{total} · {view.t:.2f}s · "
                f"{len(view.workers)} workers · {view.nodes:,} blocks known{behind}")

    def action_show_tab(self, tab: str) -> None:
        self.query_one("#fleet-tabs", TabbedContent).active = tab
        if tab == "explain":
            self.query_one("#explain-input", Input).focus()
        self._tree_at = 0.0  # the tree now, not in a second
        self.refresh_views(force=True)

    def on_tabbed_content_tab_activated(self, _message) -> None:
        self._tree_at = 0.0
        self.refresh_views(force=True)

    # ------------------------------------------------------------------ explain and go to
    def on_input_submitted(self, message: Input.Submitted) -> None:
        if message.input.id == "goto-input":
            self._goto(message.value)
            return
        out = self.query_one("#explain-out", Static)
        try:
            ids, options = parse_query(message.value, self.tokenizer)
        except QueryError as exc:
            update_if_changed(out, f"cannot explain: {exc}")
            return
        if self.collector is not None:
            update_if_changed(out, "asking the collector…")
            self.collector.explain(ids, options)
        else:
            update_if_changed(out, explain_text(self.fleet, ids, options))

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
        self.refresh_views(force=True)

    def action_leave_input(self) -> None:
        self.query_one("#goto-input", Input).display = False
        tab = self.query_one("#fleet-tabs", TabbedContent).active
        self.query_one("#fleet-tree" if tab == "tree" else "#fleet-table").focus()
