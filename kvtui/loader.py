"""Fast trace loading for replay: batched JSON parsing, light checks, progress, unknown types tolerated.

`engine.trace.read_trace` validates every field of every event (~80k events/s on a 1M-event file, mostly
`json.loads` per line and the cyclic GC rescanning the growing list). Here lines are parsed a chunk at a time
(one `json.loads` of `[line,line,...]`), the GC is paused, and each event gets the checks the reducer needs:
a JSON object, a known type's required fields present, `seq` increasing. The first events of each type are
fully validated against the schema, so a writer that gets a field's type wrong is still caught early. A chunk
that does not parse as a whole is re-read line by line to name the bad line. Event types this kvtui does not
know (a newer engine) are kept, counted and reported, and the reducer ignores them.
"""

from __future__ import annotations

import gc
import json
import os
from dataclasses import dataclass, field
from typing import Callable

from engine.trace import EVENT_FIELDS, TraceError, TraceFile, validate_event, validate_header

CHUNK_BYTES = 1 << 20
FULL_CHECKS_PER_TYPE = 200  # events of each type validated field by field (types included)
REQUIRED = {etype: frozenset(name for name, (spec, _) in fields.items() if not spec.endswith("?"))
            | {"seq", "t", "type"} for etype, fields in EVENT_FIELDS.items()}


@dataclass
class LoadedTrace(TraceFile):
    """What engine.trace's reader returns, plus the event types this kvtui does not know (kept, skipped)."""

    unknown_types: dict[str, int] = field(default_factory=dict)


Progress = Callable[[int, int, int], None]  # (bytes read, total bytes, events so far)
Batch = Callable[[list[dict]], None]


def read_header(path: str) -> tuple[dict | None, TraceError | None]:
    """The first line only: lets the CLI refuse a file that is not a trace before opening the UI."""
    with open(path, encoding="utf-8") as handle:
        first = handle.readline()
    if not first.strip():
        return None, TraceError(1, "empty trace: no header line")
    try:
        header = json.loads(first)
    except json.JSONDecodeError as exc:
        return None, TraceError(1, f"not valid JSON ({exc.msg} at column {exc.colno})")
    problem = validate_header(header)
    return (None, TraceError(1, problem)) if problem else (header, None)


def load_trace(path: str, progress: Progress | None = None, on_batch: Batch | None = None) -> LoadedTrace:
    """Read a whole trace. `on_batch` receives each chunk's events (a caller can fold them in as they come)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _load(path, progress, on_batch)
    finally:
        if enabled:
            gc.enable()


def _load(path: str, progress: Progress | None, on_batch: Batch | None) -> LoadedTrace:
    total = os.path.getsize(path)
    header, error = read_header(path)
    out = LoadedTrace(header=header or {}, error=error)
    if error is not None:
        return out
    checked: dict[str, int] = {}
    last_seq = -1
    line_no = 1
    done = 0
    with open(path, encoding="utf-8") as handle:
        done += len(handle.readline().encode("utf-8"))
        while True:
            lines = handle.readlines(CHUNK_BYTES)
            if not lines:
                break
            done += sum(len(line) for line in lines)  # characters: close enough for a progress bar
            at_end = not lines[-1].endswith("\n")
            try:
                events = json.loads("[" + ",".join(lines) + "]")
            except json.JSONDecodeError:
                events = _parse_lines(lines, line_no, at_end, out)
            batch = []
            for i, event in enumerate(events):
                problem = _check(event, checked, out.unknown_types)
                if problem is None:
                    seq = event["seq"]
                    if type(seq) is not int:
                        problem = f"{event['type']}: field 'seq' must be int"
                    elif seq <= last_seq:
                        problem = f"seq {seq} does not follow {last_seq}"
                if problem is not None:
                    out.error = TraceError(line_no + 1 + _line_index(lines, i), problem)
                    break
                last_seq = event["seq"]
                batch.append(event)
            out.events.extend(batch)
            if on_batch is not None and batch:
                on_batch(batch)
            line_no += len(lines)
            if progress is not None:
                progress(min(done, total), total, len(out.events))
            if out.error is not None or out.truncated_tail:
                break
    return out


def _line_index(lines: list[str], i: int) -> int:
    """Line index (in `lines`) of the i-th non-blank line."""
    seen = -1
    for j, line in enumerate(lines):
        if line.strip():
            seen += 1
            if seen == i:
                return j
    return len(lines) - 1


def _parse_lines(lines: list[str], line_no: int, at_end: bool, out: LoadedTrace) -> list:
    """The slow path for a chunk with a bad (or blank) line: parse one by one, stop at the bad one."""
    events = []
    for j, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            events.append(json.loads(raw))
        except json.JSONDecodeError as exc:
            if at_end and j == len(lines) - 1:
                out.truncated_tail = True
            else:
                out.error = TraceError(line_no + 1 + j, f"not valid JSON ({exc.msg} at column {exc.colno})")
            break
    return events


def _check(event, checked: dict[str, int], unknown: dict[str, int]) -> str | None:
    if not isinstance(event, dict):
        return "an event must be a JSON object"
    etype = event.get("type")
    required = REQUIRED.get(etype)
    if required is None:
        if not isinstance(etype, str) or "seq" not in event or "t" not in event:
            return f"unknown event type {etype!r}" if not isinstance(etype, str) else f"{etype}: missing seq or t"
        unknown[etype] = unknown.get(etype, 0) + 1
        return None
    n = checked.get(etype, 0)
    if n < FULL_CHECKS_PER_TYPE:
        checked[etype] = n + 1
        return validate_event(event)
    if not required <= event.keys():
        missing = sorted(required - event.keys())
        return f"{etype}: missing field {missing[0]!r}"
    return None
