"""The trace: a versioned JSON Lines stream of every fact about the KV cache.

Line 1 is a header (schema version, model shape, block size, pool size, bytes per block, per-layer windows);
every later line is one event with `seq` (monotonic from 0), `t` (seconds since the engine started) and
`type`. The schema, every field of every event, is engine/trace_schema.py. Token ids always travel with
their text, so a replay needs no tokenizer. One reader, strict or tolerant of a bad line (it keeps what came
before and says which line).
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from engine.trace_schema import (EVENT_FIELDS, SCHEMA_VERSION, schema_text,  # noqa: F401  (the reader's API)
                                 validate_event, validate_header)

TRUNCATED_TAIL_NOTE = "last line is incomplete (the writer stopped mid-line); ignored"


class TraceError(ValueError):
    """A trace line that is not valid; `line` is 1-based."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


Listener = Callable[[dict], None]


class TraceSink:
    """Numbers events, timestamps them, and hands each to every listener (a file writer, the live UI)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self._t0 = clock()
        self._seq = 0
        self.header: dict | None = None
        self.listeners: list[Listener] = []
        self.writers: list[TraceWriter] = []

    def set_header(self, header: dict) -> None:
        self.header = {"type": "header", "schema": SCHEMA_VERSION, **header}
        for writer in self.writers:
            writer.write_header(self.header)

    def add_writer(self, writer: "TraceWriter") -> None:
        self.writers.append(writer)
        if self.header is not None:
            writer.write_header(self.header)

    def now(self) -> float:
        return self._clock() - self._t0

    def emit(self, etype: str, **fields: Any) -> dict:
        event = {"seq": self._seq, "t": round(self.now(), 6), "type": etype, **fields}
        self._seq += 1
        for writer in self.writers:
            writer.write(event)
        for listener in self.listeners:
            listener(event)
        return event

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

    def write(self, event: dict) -> None:
        self._file.write(json.dumps(event, separators=(",", ":"), ensure_ascii=False) + "\n")

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self.flush()
        if self._owns:
            self._file.close()


@dataclass
class TraceFile:
    """What a reader recovered: the header, every valid event before any error, and the error if one stopped it."""

    header: dict
    events: list[dict] = field(default_factory=list)
    error: TraceError | None = None
    truncated_tail: bool = False


def parse_trace_lines(lines: Iterable[str], *, strict: bool = False) -> TraceFile:
    """Validate line by line. A bad line stops reading and is reported by number; what came before is kept.

    A last line with no newline that does not parse is a writer that crashed mid-line: dropped, not an error.
    With `strict`, the first error is raised instead of returned.
    """
    lines = list(lines)
    header: dict | None = None
    out = TraceFile(header={})
    last_seq = -1
    for index, raw in enumerate(lines):
        number = index + 1
        is_last = index == len(lines) - 1
        text = raw.strip()
        if not text:
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            if is_last and not raw.endswith("\n"):
                out.truncated_tail = True
                break
            out.error = TraceError(number, f"not valid JSON ({exc.msg} at column {exc.colno})")
            break
        if header is None:
            problem = validate_header(obj)
            if problem:
                out.error = TraceError(number, problem)
                break
            header = obj
            out.header = obj
            continue
        problem = validate_event(obj)
        if problem is None and obj["seq"] <= last_seq:
            problem = f"seq {obj['seq']} does not follow {last_seq}"
        if problem:
            out.error = TraceError(number, problem)
            break
        last_seq = obj["seq"]
        out.events.append(obj)
    if header is None and out.error is None:
        out.error = TraceError(1, "empty trace: no header line")
    if strict and out.error is not None:
        raise out.error
    return out


def read_trace(path: str | Path, *, strict: bool = False) -> TraceFile:
    with open(path, encoding="utf-8") as handle:
        return parse_trace_lines(handle, strict=strict)
