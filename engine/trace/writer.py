"""Writing the trace: `TraceSink` numbers and stamps each event and hands it to listeners and file writers."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.trace.schema import SCHEMA_VERSION

# given each event: a dict, or a struct with as_dict() (attach's block events)
Listener = Callable[[Any], None]


class TraceSink:
    """Numbers events, timestamps them, and hands each to every listener (a file writer, the live UI)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self._t0 = clock()
        self._seq = 0
        self.header: dict | None = None
        self.listeners: list[Listener] = []
        # given runs of events (emit_events)
        self.batch_listeners: list[Callable[[list[dict]], None]] = []
        self.writers: list[TraceWriter] = []

    def set_header(self, header: dict) -> None:
        self.header = {"type": "header", "schema": SCHEMA_VERSION, **header}
        for writer in self.writers:
            writer.write_header(self.header)

    def add_writer(self, writer: TraceWriter) -> None:
        self.writers.append(writer)
        if self.header is not None:
            writer.write_header(self.header)

    def now(self) -> float:
        return self._clock() - self._t0

    def emit(self, etype: str, **fields: Any) -> dict:
        return self.emit_event({"seq": 0, "t": round(self.now(), 6), "type": etype, **fields})

    def emit_event(self, event: dict) -> dict:
        """Number an event built by the caller (its `seq` key, put first for the file's sake, is overwritten; its
        `t` is kept: attach stamps each event with its message's arrival) and hand it on, as `emit` does."""
        self.emit_events((event,))
        return event

    def emit_events(self, events) -> None:
        """`emit_event` for a run of built events: each goes to every writer and listener, the run at once to
        every batch listener (a reducer that folds a run faster than one event at a time). An event is a dict,
        or a struct with `seq` and `as_dict()` (the writer writes that dict)."""
        seq = self._seq
        for event in events:
            if type(event) is dict:
                event["seq"] = seq
            # an event struct with as_dict() (kvtui attach's block events)
            else:
                event.seq = seq
            seq += 1
        self._seq = seq
        for writer in self.writers:
            for event in events:
                writer.write(event)
        for listener in self.listeners:
            for event in events:
                listener(event)
        for listener in self.batch_listeners:
            listener(events)

    def flush(self) -> None:
        for writer in self.writers:
            writer.flush()

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


class TraceWriter:
    """Appends JSON lines to a file; the engine flushes it after every step so a crash loses at most a step."""

    def __init__(self, target: str | Path | io.TextIOBase):
        if isinstance(target, (str, Path)):
            self._file = open(target, "w", encoding="utf-8")
            self._owns = True
        else:
            self._file = target
            self._owns = False
        self._header_written = False

    def write_header(self, header: dict) -> None:
        if not self._header_written:
            self._file.write(json.dumps(header, separators=(",", ":")) + "\n")
            self._header_written = True

    def write(self, event) -> None:
        if type(event) is not dict:
            event = event.as_dict()
        self._file.write(json.dumps(event, separators=(",", ":"), ensure_ascii=False) + "\n")

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self.flush()
        if self._owns:
            self._file.close()
