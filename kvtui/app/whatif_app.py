"""The what-if view in an app of its own (`kvtui whatif WORKLOAD --ui`) and as a tab of replay.

`WhatIfApp` runs the what-if job (the simulations, the one-pass curve, the fleet) in a thread worker and shows
a progress bar and the stage it is in (a production trace takes tens of seconds), then the view
(kvtui/widgets/whatif_view.py). The job is handed in: a callable that takes a progress factory
(`make_progress(label) -> progress(index, simulated_seconds)`, one per stage) and returns a what-if summary.

In `KvtuiApp` (kvtui/app/tabs.py) the tab shows the `whatif_summary` event that `kvtui whatif -o` appends to its
trace; the tab is hidden for any other trace. `request_misses` gives the miss explainer the causes of a request's
missed tokens, from the trace's events (kvtui/whatif/causes.py's `ledger_from_trace`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import Footer, ProgressBar, TabbedContent

from kvtui.widgets.base import TextLine
from kvtui.widgets.whatif_view import WhatIfView

Job = Callable[[Callable[[str], Callable[[int, float], None]]], dict]


class WhatIfApp(App):
    TITLE = "kvtui whatif"
    CSS = """
    #whatif-status { height: 1; background: $primary-background; color: $text; text-style: bold; }
    #whatif-progress { height: 1; padding: 0 1; }
    #whatif-progress.hidden { display: none; }
    """
    BINDINGS = [Binding("q", "quit", "quit", id="whatif.quit")]

    class Progressed(Message):
        def __init__(self, label: str, stage: int, index: int):
            super().__init__()
            self.label, self.stage, self.index = label, stage, index

    class Finished(Message):
        def __init__(self, summary: dict | None, error: str | None = None):
            super().__init__()
            self.summary, self.error = summary, error

    def __init__(self, job: Job, *, source: str, requests: int, stages: int):
        super().__init__()
        self.job, self.source, self.requests, self.stages = job, source, max(requests, 1), max(stages, 1)
        self.summary: dict | None = None

    def compose(self) -> ComposeResult:
        yield TextLine(id="whatif-status")
        yield ProgressBar(total=self.stages * self.requests, show_eta=False, id="whatif-progress")
        yield WhatIfView(id="whatif-view")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#whatif-status", TextLine).set(f" {self.source}: simulating ...")
        self.query_one("#whatif-view", WhatIfView).display = False
        self.run_job()

    @work(thread=True, exclusive=True)
    def run_job(self) -> None:
        stages = itertools.count()

        def make_progress(label: str) -> Callable[[int, float], None]:
            stage = next(stages)
            self.post_message(self.Progressed(label, stage, 0))
            return lambda index, _sim_t: self.post_message(self.Progressed(label, stage, index))

        try:
            summary = self.job(make_progress)
        except Exception as exc:  # noqa: BLE001 (shown to the user, not raised in a worker thread)
            self.post_message(self.Finished(None, f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(self.Finished(summary))

    def on_what_if_app_progressed(self, message: Progressed) -> None:
        done = min(message.stage, self.stages - 1) * self.requests + message.index
        self.query_one("#whatif-progress", ProgressBar).update(progress=done)
        self.query_one("#whatif-status", TextLine).set(
            f" {self.source}: {message.label} ({message.index:,}/{self.requests:,} requests; stage "
            f"{message.stage + 1} of {self.stages})"
        )

    def on_what_if_app_finished(self, message: Finished) -> None:
        self.query_one("#whatif-progress").display = False
        status = self.query_one("#whatif-status", TextLine)
        if message.error is not None:
            status.set(f" {self.source}: failed: {message.error}")
            return
        self.summary = message.summary
        status.set(f" {self.source}: what if the cache were different (q quits)")
        view = self.query_one("#whatif-view", WhatIfView)
        view.display = True
        view.show(message.summary)
        view.focus()


# --- the tab in KvtuiApp --------------------------------------------------------------------------------------
def replay_summary(app) -> dict | None:
    """The `whatif_summary` event of the trace shown (its last event), or None."""
    timeline = getattr(app, "timeline", None)
    if timeline is None or timeline.header.get("kind") != "whatif" or not timeline.events:
        return None
    last = timeline.events[-1]
    return last if last.get("type") == "whatif_summary" else None


class ReplayWhatIfView(WhatIfView):
    """The what-if tab's view: the tab shows only for a what-if trace (checked again once a trace loads)."""

    def on_mount(self) -> None:
        self._sync_tab()

    def _sync_tab(self) -> None:
        app = self.app
        timeline = getattr(app, "timeline", None)
        if timeline is None and getattr(app, "trace_path", None):
            # still loading in its worker
            self.set_timer(0.25, self._sync_tab)
            return
        tabs = app.query_one("#tabs", TabbedContent)
        if timeline is not None and timeline.header.get("kind") == "whatif":
            tabs.show_tab("whatif")
        else:
            tabs.hide_tab("whatif")


def compose_tab() -> ComposeResult:
    yield ReplayWhatIfView(id="whatif-view")


def update_tab(app, _state, _view) -> None:
    app.query_one("#whatif-view", WhatIfView).show(replay_summary(app))


# --- the miss explainer's causes --------------------------------------------------------------------------------
_LEDGERS: dict = {}


def request_misses(app, request_id: str | None):
    """The causes of the request's missed prompt tokens over the trace (a RequestMisses), None if unknown."""
    timeline = getattr(app, "timeline", None)
    if timeline is None or request_id is None:
        return None
    # once per trace; a live trace that grows is read again at most once a second
    held = _LEDGERS.get(id(timeline))
    now = time.monotonic()
    if held is None or (held[0] != len(timeline.events) and now - held[1] > 1.0):
        from kvtui.whatif.causes import ledger_from_trace

        _LEDGERS.clear()
        held = _LEDGERS[id(timeline)] = (
            len(timeline.events),
            now,
            ledger_from_trace(timeline.header, timeline.events),
        )
    ledger = held[2]
    return None if ledger is None else ledger.requests.get(request_id)
