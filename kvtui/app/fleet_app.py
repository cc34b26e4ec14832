"""FleetApp: the views of an attached vLLM / SGLang fleet, live (`kvtui attach`) or replayed from an attach trace
(`kvtui replay fleet.jsonl`): the same `FleetState` reducer folds both, so a recording shows what was seen.

Tabs: 1 fleet (one row per worker), 2 prefix tree (block hashes, tokens, holders), 3 explain (a prompt against
every worker's cache, typed in a multi-line box, chat special tokens and newlines included, or `@FILE`;
ctrl+s explains), 4 requests (kvtui proxy's log, `--requests`, read as it grows: a lane per request, arrival
to first token to last, TTFT / TPOT quantiles, and the selected request's cached tokens, vLLM's beside kvtui's
prediction at its arrival, with the explainer's why). The views draw `FleetView`s (plain data,
kvtui/state/fleet_view.py). Where they come from:
  live    `kvtui attach`: a collector process (kvtui/sources/collector.py) receives and folds the stream; each
          frame takes the latest view it sent and asks for the next (ten a second), never waiting for one;
  replay  the whole trace, folded here once (`g` goes to a percentage of it).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane

from kvtui.sources.attach_silence import SILENT_AFTER
from kvtui.sources.collector_messages import CollectorNotice, Explained, ViewReady
from kvtui.state.fleet import FleetState, replay_fleet
from kvtui.state.fleet_explain import QueryError, parse_query
from kvtui.state.fleet_view import FleetView, explain_text, fleet_view
from kvtui.state.proxy_requests import ProxyRequests
from kvtui.widgets.base import TextLine, update_if_changed
from kvtui.widgets.explain_box import ExplainBox
from kvtui.widgets.fleet_table import FleetTableView
from kvtui.widgets.fleet_tree import FleetTreeView
from kvtui.widgets.proxy_lanes import ProxyLanesView, proxy_summary
from kvtui.widgets.proxy_miss import request_detail

# seconds between prefix-tree rebuilds while events flow
TREE_EVERY = 1.0
# seconds between two views asked of the collector (a person reads ten a second at most)
VIEW_EVERY = 0.1
# bytes of kvtui proxy's log read at the start (500 requests of 4k-token prompts take about 20 MiB)
REQUESTS_TAIL = 64 << 20


def _draw_table(app: FleetApp, view: FleetView | None) -> None:
    app.query_one("#fleet-table", FleetTableView).update_fleet(view)


def _draw_tree(app: FleetApp, view: FleetView | None) -> None:
    # a view without tree rows (asked for while another tab showed) leaves the tree as it was
    if view is not None and view.tree is not None:
        app._tree_at = time.monotonic()
        app.query_one("#fleet-tree", FleetTreeView).update_fleet(view)


# The tabs, one table: tab id -> (its main view, what redraws it from a FleetView). Explain draws when the
# collector answers; Esc from its input goes to the fleet table.
FLEET_TABS: dict[str, tuple[str, Callable[[FleetApp, FleetView | None], None] | None]] = {
    "fleet": ("#fleet-table", _draw_table),
    "tree": ("#fleet-tree", _draw_tree),
    "explain": ("#fleet-table", None),
    "requests": ("#proxy-lanes", None),
}


class FleetApp(App):
    TITLE = "kvtui attach"
    CSS = """
    #fleet-status { height: 1; background: $panel; }
    #fleet-tabs { height: 1fr; }
    FleetTableView, FleetTreeView, ProxyLanesView { height: 1fr; }
    #explain-input { dock: top; height: 8; }
    #proxy-summary { height: 2; }
    #proxy-detail-box { height: 11; border-top: solid $panel; }
    """
    BINDINGS = [
        Binding("q", "quit", "quit", id="fleet.quit"),
        Binding("1", "show_tab('fleet')", "fleet", id="fleet.tab.fleet"),
        Binding("2", "show_tab('tree')", "prefix tree", id="fleet.tab.tree"),
        Binding("3", "show_tab('explain')", "explain a prompt", id="fleet.tab.explain"),
        Binding("4", "show_tab('requests')", "requests (proxy)", id="fleet.tab.requests"),
        Binding("g", "goto", "go to % (replay)", id="fleet.goto"),
        Binding("escape", "leave_input", "leave input", show=False, id="fleet.escape"),
        Binding("ctrl+s", "explain", "explain the prompt", id="fleet.explain", priority=True),
    ]

    def __init__(
        self,
        *,
        source: str = "",
        collector=None,
        tokenizer=None,
        duration: float | None = None,
        header: dict | None = None,
        events: list[dict] | None = None,
        frame_rate: float | None = 30.0,
        requests_log: str | None = None,
    ):
        super().__init__()
        # kvtui proxy's request log, read as it grows (the requests tab)
        self.requests_log = requests_log
        self.proxy_requests = ProxyRequests()
        self._requests_at = 0
        # the request chosen on the lanes; None follows the latest arrival
        self._proxy_selected: str | None = None
        self._requests_drawn = False
        self.source = source
        # a CollectorClient (live `kvtui attach`)
        self.collector = collector
        # text prompts to token ids for the explainer
        self.tokenizer = tokenizer
        self.duration = duration
        self.frame_rate = frame_rate
        # replay: the whole trace
        self.events = events
        self.live = collector is not None
        # replay: folded here
        self.fleet: FleetState | None = None
        # what the views show
        self.view: FleetView | None = None
        self.started = time.monotonic()
        self._tree_at = 0.0
        self._dead_told = False
        self._asked_at = 0.0
        if events is not None:
            self.fleet = replay_fleet(header, events)

    def compose(self) -> ComposeResult:
        yield TextLine(id="fleet-status")
        with TabbedContent(initial="fleet", id="fleet-tabs"):
            with TabPane("1 Fleet", id="fleet"):
                yield FleetTableView(id="fleet-table")
            with TabPane("2 Prefix tree", id="tree"):
                yield FleetTreeView(id="fleet-tree")
            with TabPane("3 Explain", id="explain"):
                yield Static(
                    "prompt: token ids (1 2 3), text with --tokenizer (special tokens and newlines as typed), "
                    "or @FILE; options first: salt=S lora=L group=G | prompt. ctrl+s explains; every other key "
                    "is text here (1-4 and q too): Esc leaves the box, then 1-4 switch tabs and q quits",
                    id="explain-help",
                )
                yield ExplainBox(id="explain-input", soft_wrap=True, show_line_numbers=False)
                with VerticalScroll():
                    yield Static(id="explain-out")
            with TabPane("4 Requests", id="requests"):
                yield TextLine(id="proxy-summary")
                yield ProxyLanesView(id="proxy-lanes")
                with VerticalScroll(id="proxy-detail-box"):
                    yield Static(id="proxy-detail")
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
        if self.requests_log:
            self.set_interval(1.0, self.read_requests)
        self.read_requests()
        self.refresh_views(force=True)

    def read_requests(self) -> None:
        """The proxy's new records (whole lines appended since the last read): redraw the tab when any came."""
        from kvtui.sources.proxy_log import read_log, tail_offset

        if self.requests_log:
            if not self._requests_drawn:
                # the first read: only the log's tail, as the tab keeps the latest requests
                self._requests_at = tail_offset(self.requests_log, REQUESTS_TAIL)
            new, self._requests_at = read_log(self.requests_log, self._requests_at)
            if not self.proxy_requests.extend(new) and self._requests_drawn:
                return
        self.draw_requests()

    def draw_requests(self) -> None:
        """Lanes, the TTFT / TPOT line and the selected request's explanation."""
        self._requests_drawn = True
        requests = self.proxy_requests
        shown = requests.pick(self._proxy_selected)
        lanes = self.query_one("#proxy-lanes", ProxyLanesView)
        lanes.update_requests(requests, shown)
        if self._proxy_selected is None and len(requests):
            # following the latest arrival: keep its lane in sight
            lanes.scroll_to_row(len(requests))
        summary = (
            proxy_summary(requests)
            if self.requests_log
            else "no request log: run kvtui proxy --log LOG --attach ..., then kvtui attach ... --requests LOG"
        )
        self.query_one("#proxy-summary", TextLine).set(summary)
        detail = request_detail(requests.by_id.get(shown), requests.t0)
        update_if_changed(self.query_one("#proxy-detail", Static), detail)

    def on_proxy_lanes_view_request_selected(self, message: ProxyLanesView.RequestSelected) -> None:
        self._proxy_selected = message.request_id
        self.draw_requests()

    # ------------------------------------------------------------------ live
    def tick(self) -> None:
        """Take what the collector sent; ask for the next view (with the tree when that tab is due)."""
        if not self.is_running or self.collector is None:
            # a timer that fires while the app shuts down; a replay has nothing to take
            return
        collector = self.collector
        changed = False
        for message in collector.poll():
            match message:
                case ViewReady():
                    changed = True
                case Explained(text):
                    update_if_changed(self.query_one("#explain-out", Static), text)
                case CollectorNotice(text, severity):
                    self.notify(text, severity=severity, timeout=6)
        if collector.dead is not None and not self._dead_told:
            self._dead_told = True
            self.notify(f"{collector.dead}: the views stop here", severity="error", timeout=30)
        now = time.monotonic()
        if now - self._asked_at >= VIEW_EVERY:
            self._asked_at = now
            collector.ask(with_tree=self._tree_due())
        if self.duration is not None and now - self.started >= self.duration:
            self.exit()
        if changed:
            self.refresh_views()

    def _tree_due(self, force: bool = False) -> bool:
        """The tree tab shows, and its rows are a second old (or it was just opened: force)."""
        return self.query_one("#fleet-tabs", TabbedContent).active == "tree" and (
            force or not self.live or time.monotonic() - self._tree_at >= TREE_EVERY
        )

    # ------------------------------------------------------------------ drawing
    def refresh_views(self, force: bool = False) -> None:
        tab = self.query_one("#fleet-tabs", TabbedContent).active
        # a replay: build the view here
        if self.fleet is not None:
            self.view = fleet_view(self.fleet, tree=self._tree_due(force))
        elif self.collector is not None:
            self.view = self.collector.view
        view = self.view
        self.query_one("#fleet-status", TextLine).set(self.status_text())
        _, draw = FLEET_TABS.get(tab, (None, None))
        if draw is not None:
            draw(self, view)

    def status_text(self) -> str:
        view = self.view
        mode = "LIVE attach" if self.live else "replay"
        if view is None:
            return f" {mode} · waiting for events…"
        total = f"/{len(self.events)}" if self.events is not None else ""
        received = ""
        if self.collector is not None and self.collector.counters:
            c = self.collector.counters
            replayed = f" ({c.get('replayed', 0):,} replayed)" if c.get("replayed") else ""
            received = f" · {c['messages']:,} messages{replayed}, {c['blocks']:,} block hashes received"
            # the notice that says why fades: the status line keeps the hint
            if (
                not c["messages"]
                and not c.get("replayed")
                and time.monotonic() - self.started >= SILENT_AFTER
            ):
                received += (
                    " · nothing yet: wrong address or topic, events off, or an idle server? (see notices)"
                )
        return (
            f" {mode} · {self.source} · event {view.index:,}{total} · {view.t:.2f}s · "
            f"{len(view.workers)} workers · {view.nodes:,} blocks known{received}"
        )

    def action_show_tab(self, tab: str) -> None:
        self.query_one("#fleet-tabs", TabbedContent).active = tab
        if tab == "explain":
            self.query_one("#explain-input", ExplainBox).focus()
        elif tab == "requests":
            self.query_one("#proxy-lanes", ProxyLanesView).focus()
        # the tree now, not in a second
        self._tree_at = 0.0
        self.refresh_views(force=True)

    def on_tabbed_content_tab_activated(self, _message) -> None:
        self._tree_at = 0.0
        self.refresh_views(force=True)

    # ------------------------------------------------------------------ explain and go to
    def on_input_submitted(self, message: Input.Submitted) -> None:
        if message.input.id == "goto-input":
            self._goto(message.value)

    def action_explain(self) -> None:
        """Explain what the box holds (ctrl+s), exactly as typed."""
        if self.query_one("#fleet-tabs", TabbedContent).active != "explain":
            return
        out = self.query_one("#explain-out", Static)
        try:
            ids, options = parse_query(self.query_one("#explain-input", ExplainBox).text, self.tokenizer)
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
        main_view, _ = FLEET_TABS.get(tab, FLEET_TABS["fleet"])
        self.query_one(main_view).focus()
