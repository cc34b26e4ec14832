"""Live plumbing: the engine runs in its own thread; events cross to the UI through a queue.

`EventFeed` is the thread-safe hand-over: the engine thread `put`s items, the UI drains them in batches once
per frame (a timer), so a flat-out engine never floods the event loop. Items are (kind, payload):
("header", dict), ("event", dict), ("notice", (severity, text)).
`EngineWorker` owns the engine: it is not thread-safe, so every call (load, submit, edit, fork, step) happens on
the worker thread, fed by a command queue. Tests use `EventFeed` alone and pump it by hand.
"""

from __future__ import annotations

import queue
import threading
import traceback
from typing import Any


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
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) for m in prompt) \
            and engine.tokenizer is not None and not getattr(engine.tokenizer, "chat_template", None):
        return "\n".join(str(m.get("content", "")) for m in prompt)
    return prompt


class EventFeed:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()

    def put(self, kind: str, payload: Any) -> None:
        self._queue.put((kind, payload))

    def put_event(self, event: dict) -> None:
        self._queue.put(("event", event))

    def notice(self, text: str, severity: str = "information") -> None:
        self._queue.put(("notice", (severity, text)))

    def drain(self, limit: int = 100_000) -> list[tuple[str, Any]]:
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

    def submit(self, prompt: str | list, max_tokens: int = 64, temperature: float = 0.0,
               seed: int | None = None) -> None: ...

    def abort(self, request_id: str) -> None: ...

    def edit(self, request_id: str, position: int, text: str, kind: str) -> None: ...

    def fork(self, request_id: str, n: int = 1) -> None: ...

    def stop(self) -> None: ...


class RecordingController(Controller):
    """A controller that records what the UI asked (tests)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.sampling: list[dict] = []  # temperature and seed of each submit, in order

    def submit(self, prompt, max_tokens: int = 64, temperature: float = 0.0, seed: int | None = None) -> None:
        self.calls.append(("submit", prompt, max_tokens))
        self.sampling.append({"temperature": temperature, "seed": seed})

    def abort(self, request_id) -> None:
        self.calls.append(("abort", request_id))

    def edit(self, request_id, position, text, kind) -> None:
        self.calls.append(("edit", request_id, position, text, kind))

    def fork(self, request_id, n=1) -> None:
        self.calls.append(("fork", request_id, n))


class EngineWorker(Controller):
    """Loads the engine and runs it on a daemon thread; commands arrive through a queue."""

    def __init__(self, feed: EventFeed, model: str, engine_config, save_trace: str | None = None):
        """`engine_config`: an `EngineConfig`, or a dict of its fields (None values left at their defaults)."""
        self.feed = feed
        self.model = model
        self.engine_config = engine_config
        self.save_trace = save_trace
        self.commands: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="kvtui-engine", daemon=True)

    def start(self) -> None:
        self.thread.start()

    # --- called from the UI thread: only enqueue
    def submit(self, prompt, max_tokens: int = 64, temperature: float = 0.0, seed: int | None = None) -> None:
        self.commands.put(("submit", prompt, max_tokens, temperature, seed))

    def abort(self, request_id) -> None:
        self.commands.put(("abort", request_id))

    def edit(self, request_id, position, text, kind) -> None:
        self.commands.put(("edit", request_id, position, text, kind))

    def fork(self, request_id, n=1) -> None:
        self.commands.put(("fork", request_id, n))

    def stop(self) -> None:
        self._stop.set()
        self.commands.put(("stop",))

    # --- the worker thread
    def _load(self):
        from engine.engine import Engine, EngineConfig

        self.feed.notice(f"loading model {self.model}… (the first run of the embedded model takes ~30 s)")
        _leave_a_core_for_the_ui()
        config = self.engine_config
        if isinstance(config, dict):
            config = EngineConfig(**{k: v for k, v in config.items() if v is not None})
        engine = Engine.load(model=self.model, config=config, progress=self.feed.notice)
        engine.trace.listeners.append(self.feed.put_event)
        if self.save_trace:
            engine.add_trace_file(self.save_trace)
        self.feed.put("header", engine.trace.header)
        from kvtui.machine_probe import emit_roofline

        emit_roofline(engine)  # this machine's roofline for the model, measured once (the roofline view)
        self.feed.notice(f"model {self.model} ready: type a prompt and press Enter")
        if engine.tokenizer is not None and not getattr(engine.tokenizer, "chat_template", None):
            self.feed.notice(f"{self.model} has no chat template (a base model): every prompt goes in as plain "
                             "text, chat messages included")
        return engine

    def _run(self) -> None:
        try:
            engine = self._load()
        except Exception as exc:  # unknown model, no hub, bad dtype...: say so, never crash the UI
            self.feed.notice(f"could not load model {self.model!r}: {exc}", "error")
            return
        while not self._stop.is_set():
            busy = engine.has_unfinished()
            try:
                command = self.commands.get(block=not busy, timeout=None if not busy else 0)
            except queue.Empty:
                command = None
            if command is not None:
                if command[0] == "stop":
                    break
                self._execute(engine, command)
            if engine.has_unfinished():
                try:
                    engine.step()
                except Exception as exc:
                    self.feed.notice(f"engine step failed: {exc}\n{traceback.format_exc(limit=3)}", "error")
                    break
        try:
            engine.trace.flush()
        except Exception:
            pass

    def _execute(self, engine, command: tuple) -> None:
        from engine.engine import SamplingParams

        try:
            if command[0] == "submit":
                _, prompt, max_tokens, temperature, seed = command
                engine.submit(plain_if_no_template(engine, prompt),
                              SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed))
            elif command[0] == "abort":
                engine.abort(command[1])
            elif command[0] == "edit":
                _, rid, position, text, kind = command
                ids = [] if kind == "delete" else engine.tokenizer.encode(text, add_special_tokens=False)
                if kind != "delete" and not ids:
                    raise ValueError("the replacement text encodes to no tokens")
                engine.edit(rid, position, ids, kind=kind)
            elif command[0] == "fork":
                _, rid, n = command
                engine.fork(rid, n)
        except Exception as exc:  # out of range, unknown request, not implemented yet: a notification
            self.feed.notice(f"{command[0]} failed: {exc}", "error")
