"""The tabs of `KvtuiApp`, in one table: for each tab its title, its key's description, the view that takes
the focus when it shows, what it is made of, and how it is redrawn. The app composes, binds, focuses and
refreshes the tabs from `TABS` alone; adding a tab is one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Static

from kvtui.app.whatif_app import compose_tab as compose_whatif
from kvtui.app.whatif_app import request_misses
from kvtui.app.whatif_app import update_tab as update_whatif
from kvtui.state.roofline import RooflineScan
from kvtui.widgets.base import TextLine, View, update_if_changed
from kvtui.widgets.block_pool import BlockPoolView, block_details, edit_summary, pool_legend
from kvtui.widgets.block_table import BlockTableView
from kvtui.widgets.charts import ChartsView
from kvtui.widgets.miss import explain
from kvtui.widgets.radix_tree import RadixTreeView
from kvtui.widgets.ring import RingView
from kvtui.widgets.timeline import TimelineView, latency_summary, request_summary, timing_note
from kvtui.widgets.token_strip import TokenStrip

if TYPE_CHECKING:
    from textual.app import App

    from kvtui.state import CacheState


@dataclass(frozen=True)
class Tab:
    # on the tab, after its key (1, 2, ...: the order of `TABS`)
    title: str
    # the key's, in the help and the command palette
    description: str
    # the selector of its main view, focused when the tab shows
    view: str
    compose: Callable[[], ComposeResult]
    # redraw the tab from the state and the selection (only the tab shown is redrawn)
    update: Callable[[App, CacheState | None, View], None]


def _compose_pool() -> ComposeResult:
    yield TextLine(id="pool-legend")
    yield TextLine(id="edit-summary")
    yield BlockPoolView(id="pool-grid")
    with Horizontal(id="pool-bottom"):
        yield BlockTableView(id="block-table")
        yield TextLine(id="block-details")


def _update_pool(app: App, state: CacheState | None, view: View) -> None:
    grid = app.query_one("#pool-grid", BlockPoolView)
    view.block = grid.cursor
    app.query_one("#pool-legend", TextLine).set(pool_legend(state, view))
    app.query_one("#edit-summary", TextLine).set(edit_summary(state, view.request_id))
    app.query_one("#block-details", TextLine).set(block_details(state, grid.cursor))
    grid.update_view(view)
    app.query_one("#block-table", BlockTableView).update_view(view)


def _compose_requests() -> ComposeResult:
    yield TextLine(id="latency")
    yield TextLine(id="timing-note")
    yield TextLine(id="request-summary")
    yield TimelineView(id="lanes")


def _update_requests(app: App, state: CacheState | None, view: View) -> None:
    app.query_one("#latency", TextLine).set(latency_summary(state))
    timeline = getattr(app, "timeline", None)
    if timeline is not None and state is not None:
        # one scan per app, extended as a live trace grows
        scan = app.__dict__.setdefault("_timing_scan", RooflineScan())
        scan.update(timeline.events)
        note = timing_note(scan.upto(state.index), scan.roofline)
    else:
        note = ""
    app.query_one("#timing-note", TextLine).set(note)
    app.query_one("#request-summary", TextLine).set(request_summary(view.request))
    app.query_one("#lanes", TimelineView).update_view(view)


def _compose_tree() -> ComposeResult:
    yield RadixTreeView(id="radix")
    with VerticalScroll(id="miss-box"):
        yield Static(id="miss")


def _update_tree(app: App, state: CacheState | None, view: View) -> None:
    app.query_one("#radix", RadixTreeView).update_view(view)
    misses = request_misses(app, view.request_id)
    update_if_changed(app.query_one("#miss", Static), explain(state, view.request, misses))


def _one_view(cls: type, view_id: str) -> tuple[Callable[[], ComposeResult], Callable]:
    """A tab that is one view: how to compose it and how to redraw it."""

    def compose() -> ComposeResult:
        yield cls(id=view_id)

    def update(app: App, state: CacheState | None, view: View) -> None:
        app.query_one(f"#{view_id}", cls).update_view(view)

    return compose, update


TABS: dict[str, Tab] = {
    "pool": Tab("Pool", "pool", "#pool-grid", _compose_pool, _update_pool),
    "requests": Tab("Requests", "requests", "#lanes", _compose_requests, _update_requests),
    "tree": Tab("Prefix tree", "prefix tree", "#radix", _compose_tree, _update_tree),
    "metrics": Tab("Metrics", "metrics", "#charts", *_one_view(ChartsView, "charts")),
    "rings": Tab("Rings", "rings", "#ring-view", *_one_view(RingView, "ring-view")),
    "tokens": Tab("Tokens", "tokens", "#token-strip", *_one_view(TokenStrip, "token-strip")),
    # shown for a what-if trace only (kvtui whatif -o): its curve, miss causes and fleet
    "whatif": Tab("What if", "what-if curve and causes", "#whatif-view", compose_whatif, update_whatif),
}


def tab_bindings() -> list[Binding]:
    """1, 2, ...: show the tab of that number."""
    return [
        Binding(str(key), f"show_tab('{tab_id}')", tab.description, show=False, id=f"tab.{tab_id}")
        for key, (tab_id, tab) in enumerate(TABS.items(), 1)
    ]


def tab_label(tab_id: str) -> str:
    """What the tab says: its key and its title ("1 Pool")."""
    return f"{list(TABS).index(tab_id) + 1} {TABS[tab_id].title}"
