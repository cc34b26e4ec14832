"""Live plumbing: the engine runs in its own thread; events cross to the UI through a queue.

`EventFeed` is the thread-safe hand-over: the engine thread `put`s items, the UI drains them in batches once
per frame (a timer), so a flat-out engine never floods the event loop. Items are typed messages
(feed_messages.py): `FeedHeader`, `FeedEvent`, `FeedNotice`, `EngineDied`.
`EngineWorker` owns the engine: it is not thread-safe, so every call (load, submit, edit, fork, step) happens on
the worker thread, fed by a queue of typed commands (feed_messages.py too). Tests use `EventFeed` alone and
pump it by hand.
"""

from __future__ import annotations

import queue
import threading
import traceback

from kvtui.app.feed_messages import (
    AbortRequest,
    Command,
    EditTokens,
    EngineDied,
    FeedEvent,
    FeedHeader,
    FeedItem,
    FeedNotice,
    ForkRequest,
    HoldEngine,
    StepOnce,
    StopEngine,
    SubmitPrompt,
)


def _leave_a_core_for_the_ui() -> None:
    """torch's intra-op threads on every core fight the UI thread for the CPU: on a 2-core machine decoding ran
    at 1.4 tok/s with the UI open vs 11.4 tok/s with one core left to the UI (kvtui bench live)."""
    import os

    import torch

    cores = os.cpu_count() or 1
    if cores > 1 and torch.get_num_threads() >= cores:
        torch.set_num_threads(cores - 1)


def plain_if_no_template(engine, prompt):
    """Chat messages for a model without a chat template (a base model such as Gemma 3 270M) go in as plain text:
    their contents, one per line (a made-up template would only give the base model junk to continue)."""
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(m, dict) for m in prompt)
        and engine.tokenizer is not None
        and not getattr(engine.tokenizer, "chat_template", None)
    ):
        return "\n".join(str(m.get("content", "")) for m in prompt)
    return prompt


class EventFeed:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()

    def put(self, item: FeedItem) -> None:
        self._queue.put(item)

    def put_event(self, event: dict) -> None:
        """The engine's trace listener: one `FeedEvent` per event."""
        self._queue.put(FeedEvent(event))

    def notice(self, text: str, severity: str = "information") -> None:
        self._queue.put(FeedNotice(text, severity))

    def drain(self, limit: int = 100_000) -> list[FeedItem]:
        """Up to `limit` items without blocking (the frame budget bounds a batch)."""
        out = []
        get = self._queue.get_nowait
        try:
            while len(out) < limit:
                out.append(get())
        except queue.Empty:
            pass
        return out


class Controller:
    """What the live UI asks of an engine. This base does nothing (a replay, or a test that pumps events)."""

    # why the engine stopped, once it has (the prompt box says so)
    dead: str | None = None

    def submit(
        self, prompt: str | list, max_tokens: int = 64, temperature: float = 0.0, seed: int | None = None
    ) -> None: ...

    def abort(self, request_id: str) -> None: ...

    def edit(
        self,
        request_id: str,
        position: int,
        text: str,
        kind: str,
        num_tokens: int = 1,
        expected_token: int | None = None,
    ) -> None:
        """Edit tokens [position, position + num_tokens) (replace, delete) or insert before position.

        `expected_token`: the token id the view showed at `position`; the engine refuses the edit when its
        request has moved on (the view was behind it)."""

    def fork(self, request_id: str, n: int = 1) -> None: ...

    def hold(self, held: bool) -> None:
        """Stop stepping between two steps (held) so a person can look, or go on."""

    def step_once(self) -> None:
        """While held: run one engine step."""

    def stop(self) -> None: ...


class RecordingController(Controller):
    """A controller that records what the UI asked (tests)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        # temperature and seed of each submit, in order
        self.sampling: list[dict] = []

    def submit(self, prompt, max_tokens: int = 64, temperature: float = 0.0, seed: int | None = None) -> None:
        self.calls.append(("submit", prompt, max_tokens))
        self.sampling.append({"temperature": temperature, "seed": seed})

    def abort(self, request_id) -> None:
        self.calls.append(("abort", request_id))

    def edit(self, request_id, position, text, kind, num_tokens=1, expected_token=None) -> None:
        self.calls.append(("edit", request_id, position, text, kind, num_tokens, expected_token))

    def fork(self, request_id, n=1) -> None:
        self.calls.append(("fork", request_id, n))

    def hold(self, held) -> None:
        self.calls.append(("hold", held))

    def step_once(self) -> None:
        self.calls.append(("step_once",))


class EngineWorker(Controller):
    """Loads the engine and runs it on a daemon thread; commands arrive through a queue.

    `stop` (the app quitting) ends the loop between two steps, aborts what is still running (each request gets
    its `request_finished`, reason aborted), closes the trace files and joins the thread: a trace saved with
    --save-trace is complete and readable. If loading or a step fails, the worker reports it once as
    `EngineDied(reason)` on the feed and `dead` says why."""

    # seconds `stop` waits for the step in flight
    STOP_TIMEOUT = 30.0

    def __init__(
        self, feed: EventFeed, model: str, engine_config, save_trace: str | None = None, engine_factory=None
    ):
        """`engine_config`: an `EngineConfig`, or a dict of its fields (None values left at their defaults).
        `engine_factory`: builds the engine instead of loading `model` (tests: a tiny model)."""
        self.feed = feed
        self.model = model
        self.engine_config = engine_config
        self.save_trace = save_trace
        self.engine_factory = engine_factory
        self.commands: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        # the worker thread's own: held between steps, and the steps asked for while held
        self._held = False
        self._steps_asked = 0
        self.dead = None
        self.thread = threading.Thread(target=self._run, name="kvtui-engine", daemon=True)

    def start(self) -> None:
        self.thread.start()

    # --- called from the UI thread: only enqueue
    def submit(self, prompt, max_tokens: int = 64, temperature: float = 0.0, seed: int | None = None) -> None:
        self.commands.put(SubmitPrompt(prompt, max_tokens, temperature, seed))

    def abort(self, request_id) -> None:
        self.commands.put(AbortRequest(request_id))

    def edit(self, request_id, position, text, kind, num_tokens=1, expected_token=None) -> None:
        self.commands.put(EditTokens(request_id, position, text, kind, num_tokens, expected_token))

    def fork(self, request_id, n=1) -> None:
        self.commands.put(ForkRequest(request_id, n))

    def hold(self, held) -> None:
        self.commands.put(HoldEngine(held))

    def step_once(self) -> None:
        self.commands.put(StepOnce())

    def stop(self) -> None:
        """Stop after the step in flight and wait for the thread (the trace is closed when this returns)."""
        self._stop.set()
        self.commands.put(StopEngine())
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(self.STOP_TIMEOUT)

    # --- the worker thread
    def _load(self):
        from engine.engine import Engine, EngineConfig

        if self.engine_factory is not None:
            engine = self.engine_factory()
        else:
            self.feed.notice(f"loading model {self.model}… (the first run of the embedded model takes ~30 s)")
            _leave_a_core_for_the_ui()
            config = self.engine_config
            if isinstance(config, dict):
                config = EngineConfig(**{k: v for k, v in config.items() if v is not None})
            engine = Engine.load(model=self.model, config=config, progress=self.feed.notice)
        engine.trace.listeners.append(self.feed.put_event)
        if self.save_trace:
            engine.add_trace_file(self.save_trace)
        self.feed.put(FeedHeader(engine.trace.header))
        from engine.worker.machine_probe import emit_roofline

        # this machine's roofline for the model, measured once (the roofline view)
        emit_roofline(engine)
        self.feed.notice(f"model {self.model} ready: type a prompt and press Enter")
        if engine.tokenizer is not None and not getattr(engine.tokenizer, "chat_template", None):
            self.feed.notice(
                f"{self.model} has no chat template (a base model): every prompt goes in as plain "
                "text, chat messages included"
            )
        return engine

    def _die(self, reason: str) -> None:
        self.dead = reason
        self.feed.put(EngineDied(reason))

    def _run(self) -> None:
        try:
            engine = self._load()
        # unknown model, no hub, bad dtype...: say so, never crash the UI
        except Exception as exc:
            self._die(f"could not load model {self.model!r}: {exc}")
            return
        try:
            self._loop(engine)
        finally:
            self._shut_down(engine)

    def _may_step(self, engine) -> bool:
        return engine.has_unfinished() and (not self._held or self._steps_asked > 0)

    def _loop(self, engine) -> None:
        while not self._stop.is_set():
            # held: wait for a command (a step asked for, a resume) instead of stepping
            busy = self._may_step(engine)
            try:
                command = self.commands.get(block=not busy, timeout=None if not busy else 0)
            except queue.Empty:
                command = None
            if command is not None:
                if isinstance(command, StopEngine):
                    return
                self._execute(engine, command)
            if self._may_step(engine) and not self._stop.is_set():
                self._steps_asked = max(0, self._steps_asked - 1)
                try:
                    engine.step()
                except Exception as exc:
                    self.feed.notice(f"engine step failed: {exc}\n{traceback.format_exc(limit=3)}", "error")
                    self._die(f"the engine stopped: a step failed ({type(exc).__name__}: {exc})")
                    return

    def _shut_down(self, engine) -> None:
        """Abort what still runs (so the trace says how each request ended), then close the trace files."""
        if self.dead is None:
            for request_id, req in list(engine.requests.items()):
                if req.finish_reason is None:
                    try:
                        engine.abort(request_id)
                    except Exception:  # noqa: BLE001 (closing the trace matters more)
                        break
        try:
            engine.trace.close()
        except Exception:  # noqa: BLE001
            pass

    def _execute(self, engine, command: Command) -> None:
        from engine.engine import SamplingParams

        try:
            match command:
                case SubmitPrompt(prompt, max_tokens, temperature, seed):
                    engine.submit(
                        plain_if_no_template(engine, prompt),
                        SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed),
                    )
                case AbortRequest(request_id):
                    engine.abort(request_id)
                case EditTokens(request_id, position, text, kind, num_tokens, expected_token):
                    apply_live_edit(engine, request_id, position, text, kind, num_tokens, expected_token)
                case ForkRequest(request_id, n):
                    engine.fork(request_id, n)
                case HoldEngine(held):
                    self._held, self._steps_asked = held, 0
                case StepOnce():
                    if not engine.has_unfinished():
                        self.feed.notice("nothing to step: no request is running or waiting", "warning")
                    elif self._held:
                        self._steps_asked += 1
        # out of range, unknown request, a stale view: a notification
        except Exception as exc:
            self.feed.notice(f"{_VERBS.get(type(command), 'command')} failed: {exc}", "error")


# what the user asked for, in the notice of a command that failed
_VERBS = {SubmitPrompt: "submit", AbortRequest: "abort", EditTokens: "edit", ForkRequest: "fork"}


def apply_live_edit(
    engine,
    request_id: str,
    position: int,
    text: str,
    kind: str,
    num_tokens: int = 1,
    expected_token: int | None = None,
) -> None:
    """One edit from the live UI: replace tokens [position, position + num_tokens) by `text`, whatever its
    length in tokens; insert `text` before position; or delete num_tokens tokens.

    A replacement of another length is one edit (engine.edit's num_replaced). Every edit carries
    `expected_token`: a stale view is refused before anything changes."""
    ids = [] if kind == "delete" else engine.tokenizer.encode(text, add_special_tokens=False)
    if kind != "delete" and not ids:
        raise ValueError("the text encodes to no tokens: type something to put there")
    if kind == "insert":
        engine.edit(request_id, position, ids, kind="insert", expected_token=expected_token)
    elif kind == "delete":
        engine.edit(request_id, position, num_tokens, kind="delete", expected_token=expected_token)
    # the selection becomes the typed tokens, however many: one edit
    else:
        engine.edit(
            request_id, position, ids, kind="replace", num_replaced=num_tokens, expected_token=expected_token
        )
