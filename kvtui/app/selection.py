"""Selection: which tab is shown, which request is selected, and the widgets' selection messages."""

from __future__ import annotations

from textual.widgets import TabbedContent

from kvtui.app.tabs import TABS
from kvtui.widgets.block_pool import BlockPoolView
from kvtui.widgets.radix_tree import RadixTreeView
from kvtui.widgets.timeline import TimelineView
from kvtui.widgets.token_strip import TokenStrip


class SelectionMixin:
    """The part of `KvtuiApp` that moves between tabs and requests."""

    def action_show_tab(self, tab: str) -> None:
        tabs = self.query_one("#tabs", TabbedContent)
        # a hidden tab (what-if on a trace not made by `kvtui whatif -o`) made active breaks the tab bar's arrows
        if not tabs.get_tab(tab).display:
            self.notify(
                f"no '{TABS[tab].title}' tab for this trace (it shows for a trace written by kvtui whatif -o)",
                severity="warning",
                timeout=3,
            )
            return
        tabs.active = tab
        self.focus_tab()
        self.refresh_views()

    def focus_tab(self) -> None:
        """Focus the main view of the tab shown."""
        tab = TABS.get(self.query_one("#tabs", TabbedContent).active, TABS["pool"])
        self.query_one(tab.view).focus()

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
            # the last token
            self.query_one("#token-strip", TokenStrip).cursor = None
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

    def on_block_pool_view_mode_changed(self, message: BlockPoolView.ModeChanged) -> None:
        self.refresh_views()

    def on_timeline_view_request_selected(self, message: TimelineView.RequestSelected) -> None:
        self.select_request(message.request_id)

    def on_token_strip_cursor_moved(self, message: TokenStrip.CursorMoved) -> None:
        self.query_one("#token-strip", TokenStrip).refresh()
