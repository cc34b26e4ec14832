"""The collector: `kvtui attach`'s receiving, decoding and folding, in a process of its own.

A fleet can publish far more than one Python thread can fold and draw at once (on a 2-core machine: decode
~2 us, event ~1 us and fold ~3 us per block; drawing takes a share of the same interpreter lock, and two
threads of one process slow each other down to ~45k blocks/s). So the UI process starts a collector and only
draws: the collector runs the `Attacher` (sockets, sequence, replay, decode), folds its events into a
`FleetState`, writes the -o trace, and answers the UI over a pipe with `FleetView`s (plain data,
kvtui/state/fleet_view.py) and explanations. Two processes, two cores: frames stay short whatever arrives.

Over the pipe, typed messages (collector_messages.py), pickled:
  UI -> collector   AskView(with_tree) | AskExplain(token_ids, options) | StopCollecting()
  collector -> UI   ViewReady(view, counters) | Explained(text) | CollectorNotice(text, severity)
                    | CollectorStopped(counters) | CollectorFailed(why)   (the trace is closed; it exits)
Requests are answered on the thread that folds, between two folds (it needs no lock this way): between two
messages, and every few hundred batches of a long replay; the pipe is one more file descriptor the
attacher's loop polls.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import time
from dataclasses import asdict

from kvtui.sources.collector_messages import (
    AskExplain,
    AskView,
    CollectorFailed,
    CollectorNotice,
    CollectorStopped,
    Explained,
    FromCollector,
    StopCollecting,
    ToCollector,
    ViewReady,
)

# seconds the UI waits for the collector to close its trace
STOP_TIMEOUT = 10.0
# the collector's scheduling priority below the UI's
NICENESS = 5
# seconds between two gc.freeze() of the collector's state (a freeze costs nothing)
FREEZE_EVERY = 0.05


def collect(
    conn, sources: list, header: dict, out: str | None, tokenizer: str | None, replay_timeout: float
) -> None:
    """The collector process: attach, fold, answer the UI until it says stop (or goes away)."""
    # Ctrl-C is for the UI, which then stops us in order
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        # where the two compete for a core, the UI's frames come first; we catch up after
        os.nice(NICENESS)
    except OSError:
        pass
    from engine.trace import TraceSink, TraceWriter
    from kvtui.sources.attach import Attacher, anchored, load_tokenizer
    from kvtui.state.fleet import FleetState

    tok = None
    if tokenizer:
        try:
            tok = load_tokenizer(tokenizer)
        # the UI process loaded it already; say why this one could not
        except ValueError as exc:
            conn.send(CollectorNotice(f"collector: {exc}", "warning"))
    sink = TraceSink()
    if out:
        sink.add_writer(TraceWriter(out))
    sink.set_header(anchored(header, sink))
    fleet = FleetState(sink.header)
    sink.batch_listeners.append(fleet.apply_all)
    attacher = Attacher(sources, sink, tokenizer=tok, replay_timeout=replay_timeout)
    server = _Server(conn, attacher, fleet)
    attacher.wake_fds.append(conn.fileno())
    attacher.after_messages.append(server.serve)
    attacher.start_metrics()
    failure = None
    try:
        attacher.run()
        # the loop gave up by itself (sockets that would not open)
        if not attacher.stopping():
            failure = "the collector stopped: " + "; ".join(t for _, t in _drain(attacher.notices))
    # a bug of ours: the UI says so instead of waiting for views forever
    except Exception as exc:
        failure = f"the collector failed: {type(exc).__name__}: {exc}"
    finally:
        sink.close()
        try:
            conn.send(CollectorFailed(failure) if failure else CollectorStopped(asdict(attacher.counters)))
        # the UI is gone
        except OSError:
            pass


def _drain(q) -> list:
    out = []
    while not q.empty():
        out.append(q.get())
    return out


class _Server:
    """Answers the UI's requests on the collector's only thread that folds (the attacher's loop)."""

    def __init__(self, conn, attacher, fleet):
        self.conn, self.attacher, self.fleet = conn, attacher, fleet
        self.frozen_at = time.monotonic()

    def serve(self) -> None:
        from kvtui.state.fleet_view import explain_text, fleet_view

        conn, attacher = self.conn, self.attacher
        if time.monotonic() - self.frozen_at >= FREEZE_EVERY:
            # what survived is the fleet's state, long-lived: collections then scan only what came since (a
            # full one over a few hundred thousand blocks halved the fold rate); nothing here makes cycles
            gc.freeze()
            self.frozen_at = time.monotonic()
        try:
            for severity, text in _drain(attacher.notices):
                conn.send(CollectorNotice(text, severity))
            while conn.poll(0):
                request: ToCollector = conn.recv()
                match request:
                    case AskView(with_tree):
                        # rates decay while nothing comes
                        self.fleet.now = max(self.fleet.t, attacher.sink.now())
                        conn.send(
                            ViewReady(fleet_view(self.fleet, tree=with_tree), asdict(attacher.counters))
                        )
                    case AskExplain(token_ids, options):
                        try:
                            text = explain_text(self.fleet, token_ids, options)
                        # a fleet the explainer did not foresee: say so, keep collecting
                        except Exception as exc:
                            text = f"cannot explain: {type(exc).__name__}: {exc}"
                        conn.send(Explained(text))
                    case StopCollecting():
                        attacher.stop()
                        return
        # the UI process ended without saying stop: end too
        except (EOFError, OSError):
            attacher.stop()


class CollectorClient:
    """The UI's end: starts the collector, asks for views without ever waiting on one (a frame polls), stops
    it in order (so the -o trace is whole)."""

    def __init__(
        self,
        sources: list,
        header: dict,
        *,
        out: str | None = None,
        tokenizer: str | None = None,
        replay_timeout: float = 2.0,
    ):
        # no fork of a process that runs threads and a terminal UI
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=collect,
            args=(child, sources, header, out, tokenizer, replay_timeout),
            name="kvtui-collector",
            daemon=True,
        )
        self.process.start()
        child.close()
        # the latest FleetView
        self.view = None
        # the attacher's: messages, events, blocks, malformed, gaps, lost, restarts
        self.counters: dict = {}
        # a view request is on its way
        self.asked = False
        # why the collector stopped answering, once it has
        self.dead: str | None = None
        self.stopped = False

    def ask(self, with_tree: bool) -> None:
        """Ask for the next view, unless one is already on its way."""
        if not self.asked and self.dead is None:
            self._send(AskView(with_tree))
            self.asked = True

    def explain(self, token_ids: list[int], options: dict) -> None:
        self._send(AskExplain(token_ids, options))

    def poll(self) -> list[FromCollector]:
        """What the collector sent since the last call (views are kept in `view`), without waiting."""
        out = []
        try:
            while self.conn.poll(0):
                message: FromCollector = self.conn.recv()
                match message:
                    case ViewReady(view, counters):
                        self.view, self.counters, self.asked = view, counters, False
                    case CollectorStopped(counters):
                        self.counters, self.stopped = counters, True
                    case CollectorFailed(why):
                        self.dead = why
                out.append(message)
        except (EOFError, OSError):
            self._died()
        if self.dead is None and not self.stopped and not self.process.is_alive():
            self._died()
        return out

    def stop(self, timeout: float = STOP_TIMEOUT) -> dict:
        """Stop the collector after the message it is folding; its trace is closed when this returns."""
        if self.dead is None and not self.stopped:
            self._send(StopCollecting())
            deadline = time.monotonic() + timeout
            while not self.stopped and self.dead is None and time.monotonic() < deadline:
                if self.conn.poll(0.05):
                    self.poll()
                elif not self.process.is_alive():
                    self.poll()
                    break
        self.process.join(2.0)
        if self.process.is_alive():
            self.process.terminate()
        return self.counters

    def _send(self, message: ToCollector) -> None:
        try:
            self.conn.send(message)
        except (BrokenPipeError, OSError):
            self._died()

    def _died(self) -> None:
        if self.dead is None and not self.stopped:
            code = self.process.exitcode
            self.dead = "the collector process stopped" + (f" (exit code {code})" if code is not None else "")
