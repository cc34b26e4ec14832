"""The tabs of `KvtuiApp`, in one table: for each tab its title, its key's description, the view that takes
the focus when it shows, what it is made of, how it is redrawn, and what the help (`?`) says of it. The app
composes, binds, focuses, refreshes and explains the tabs from `TABS` alone; adding a tab is one entry here.
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
    # what it shows, in the help (Markdown); what a trace adds to it is in kvtui/screens/help.py
    help: str = ""


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
    app.query_one("#pool-legend", TextLine).set(pool_legend(state, view, grid.by_group))
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


POOL_HELP = """\
every physical block is one cell: `■` in use, a digit = shared by that many requests (ref count), `□` cached
(no owner, kept in the prefix tree, evictable), `·` free, `▶` being written this step; the legend counts each.
Below it the selected request's **block table** (logical -> physical, fill of each block, tail waste in the
last block; for a request holding no blocks, the blocks it will hit or the tree keeps of it) and the block under
the cursor: its tokens, ref count, hash, owners, age. After an edit: {EDIT_COLOURS}. In vLLM's paged layout
(`--window-layout paged`) the KV-cache groups share the pool: `w` colors each block by its group, and under
the block table each other group's blocks follow, those that left a sliding window drawn as freed."""
REQUESTS_HELP = """\
one lane per request over trace time: `·` queued, `█` prefill chunk, `▪` decode step, `─` running, `E` edit,
`P` preempted, `┃` finished. Above: TTFT / TPOT / ITL percentiles."""
TREE_HELP = """\
the radix tree, one row per node: its token run, its blocks, hits, lock refs (running requests using it), last
access. Fresh marks: insert, hit, split; recent evictions below. Under it the **miss explainer** of the
selected request: how many prompt tokens came from the cache and why matching stopped (divergent token, block
floor, evicted, salt, short prompt, ...)."""
METRICS_HELP = """\
hit rates and KV memory over time; the pool's bytes beside the formula's bytes (tokens held x bytes per token,
the formula spelled out)."""
RINGS_HELP = """\
sliding-window layers: W slots per request, the write head `▼`, the position in each slot, in its role (legend:
sink kept forever, recent in the window, heavy hitter kept for its attention in a `kvtui sinks --trace`
trace); under them, where in the sequence the held positions lie."""
TOKENS_HELP = """\
the selected request's tokens with boundaries and positions; move the cursor (shift+arrows select a range; on a
finished request `→` goes past the last token) and, live, `r` replace the selection by typed text of any
length, `i` insert before the cursor (past the last token: after it, a new turn), `d` delete the selection, `f`
fork. An edit goes to the engine's present: scrubbed back, the view jumps to live first, and the engine refuses
an edit whose token it no longer has there."""
WHATIF_HELP = """\
a trace written by `kvtui whatif -o`: the hit-rate curve against capacity (one-pass LRU, the optimal bound, the
simulated points), the miss causes as bars, and the fleet table with `--workers`."""

TABS: dict[str, Tab] = {
    "pool": Tab("Pool", "pool", "#pool-grid", _compose_pool, _update_pool, POOL_HELP),
    "requests": Tab("Requests", "requests", "#lanes", _compose_requests, _update_requests, REQUESTS_HELP),
    "tree": Tab("Prefix tree", "prefix tree", "#radix", _compose_tree, _update_tree, TREE_HELP),
    "metrics": Tab("Metrics", "metrics", "#charts", *_one_view(ChartsView, "charts"), METRICS_HELP),
    "rings": Tab("Rings", "rings", "#ring-view", *_one_view(RingView, "ring-view"), RINGS_HELP),
    "tokens": Tab("Tokens", "tokens", "#token-strip", *_one_view(TokenStrip, "token-strip"), TOKENS_HELP),
    # shown for a what-if trace only (kvtui whatif -o): its curve, miss causes and fleet
    "whatif": Tab(
        "What if", "what-if curve and causes", "#whatif-view", compose_whatif, update_whatif, WHATIF_HELP
    ),
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
