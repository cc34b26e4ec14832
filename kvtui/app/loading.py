"""Replay: loading a trace file in a thread worker, with progress on the status line and notices for what the
loader skipped or could not read."""

from __future__ import annotations

from textual import work
from textual.message import Message

from kvtui.app.loader import BatchRejected, LoadedTrace, TraceError, load_trace, read_header, skipped_warnings
from kvtui.state.timeline import Timeline
from kvtui.whatif.labels import relabel, scan_run_length
from kvtui.widgets.base import TextLine


class LoadingMixin:
    """The part of `KvtuiApp` that loads `trace_path` (set `loading` while it runs, then the timeline)."""

    # Handlers keep the names they had as KvtuiApp.LoadProgress / KvtuiApp.Loaded (namespace "kvtui_app").
    class LoadProgress(Message, namespace="kvtui_app"):
        def __init__(self, done: int, total: int, events: int):
            super().__init__()
            self.done, self.total, self.events = done, total, events

    class Loaded(Message, namespace="kvtui_app"):
        def __init__(self, timeline: Timeline | None, loaded: LoadedTrace):
            super().__init__()
            self.timeline, self.loaded = timeline, loaded

    @work(thread=True, exclusive=True, group="load")
    def load_worker(self, path: str) -> None:
        """Parse and fold the trace off the UI thread; the status line shows progress meanwhile.

        Never raises: a file that cannot be read, a bad line, or an event the reducer cannot apply (a block id
        outside the pool, say) ends the load with a notice naming the line; the events before it are shown.
        """
        try:
            header, error = read_header(path)
            if header is None:
                self.post_message(self.Loaded(None, LoadedTrace(header={}, error=error)))
                return
            timeline = Timeline(header)
            # made-up token ids (kvtui whatif -o): labels a person can read (#0 #1 #2 for hash ids)
            run = None
            if header.get("kind") == "whatif":
                # the run writes it; a header without it: inferred from the prompts
                run = header.get("whatif", {}).get("tokens_per_hash_id") or scan_run_length(path, header)

            def on_batch(batch: list[dict]) -> None:
                fold(timeline, batch if run is None else relabel(batch, run))

            loaded = load_trace(
                path,
                progress=lambda done, total, n: self.post_message(self.LoadProgress(done, total, n)),
                on_batch=on_batch,
            )
        except OSError as exc:
            self.post_message(
                self.Loaded(None, LoadedTrace(header={}, error=TraceError(0, f"cannot read: {exc}")))
            )
            return
        self.post_message(self.Loaded(timeline, loaded))

    def on_kvtui_app_load_progress(self, message: LoadProgress) -> None:
        self.loading = (message.done, message.total, message.events)
        self.query_one("#status", TextLine).set(self.status_text(self.size.width))

    def on_kvtui_app_loaded(self, message: Loaded) -> None:
        self.loading = None
        loaded, source = message.loaded, self.source
        if loaded.error is not None:
            where = f"{source}, line {loaded.error.line}" if loaded.error.line else f"{source}"
            self.notify(
                f"{where}: {loaded.error.message} - showing the {len(loaded.events)} events before it",
                severity="error",
                timeout=10,
            )
        for text in skipped_warnings(loaded, source):
            self.notify(text, severity="warning", timeout=6)
        if message.timeline is None:
            return
        self.timeline = message.timeline
        if self.open_interesting:
            self._open_at_interesting_point()
            self._block_cursor_to_request()
        else:
            self.state, self.cursor = self.timeline.state_at(0), 0
        # a sinks experiment's trace holds rings and no blocks: its story is on the Rings tab
        if self.timeline.header.get("kind") == "sinks":
            self.action_show_tab("rings")
        self.refresh_views()


def fold(timeline: Timeline, batch: list[dict]) -> None:
    """`timeline.extend`, turning an event the reducer cannot apply into the reader's BatchRejected (its line)."""
    before = len(timeline)
    try:
        timeline.extend(batch)
    # a schema-valid event that contradicts the state so far (a corrupted trace)
    except Exception as exc:
        i = len(timeline) - before
        raise BatchRejected(
            i,
            f"{batch[i]['type']}: the viewer cannot apply this event to the state so far "
            f"({type(exc).__name__}: {exc})",
        ) from None
