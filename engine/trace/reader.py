"""The one trace reader: `read_trace` (a file) and `parse_trace_lines` (lines in memory), strict or tolerant.

Both modes check every line the same way: valid UTF-8 JSON, the header first, every event a known type with
every field of the schema's type (engine/trace/schema.py), `seq` counting up by one. They differ only in what a
bad line does: strict raises its `TraceError`; tolerant stops there, keeps every event before it and returns
the error (line number and reason) in `TraceFile.error`. Either way, a last line with no newline that does not
parse is a writer that stopped mid-line: dropped and flagged (`truncated_tail`), not an error.

`allow_unknown` (replay) keeps events of types this kvtui does not know (a newer engine) and counts them in
`unknown_types`: the reducer ignores them. Otherwise an unknown type is a bad line.

Speed: the file is read in 1 MiB blocks of bytes, each block's lines parsed by one `json.loads` of
`[line,line,...]` and checked by a predicate generated from the schema (`FAST_CHECKS`); only a block with a bad
line is re-read line by line to name it. The cyclic GC is paused meanwhile. `on_batch` receives each block's
events as they come (the replay folds them into its timeline while the file loads); if it raises
`BatchRejected(i, why)`, event i of the batch becomes the bad line. A line over `MAX_LINE_BYTES` is refused
without reading it whole into one string. A zstd-compressed trace is decompressed as it is read (compressed.py);
progress then counts compressed bytes, and a damaged or cut-short stream is the error of line 0 (the file).
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from engine.trace.compressed import CompressedFileError, decompressing, open_binary, read_position
from engine.trace.schema import FAST_CHECKS, validate_event, validate_header

CHUNK_BYTES = 1 << 20
# an event line is a few hundred bytes; a 100k-token radix_insert is ~2 MB
MAX_LINE_BYTES = 16 << 20
TRUNCATED_TAIL_NOTE = "last line is incomplete (the writer stopped mid-line); ignored"
EMPTY_FILE = "empty file: no header line (a trace starts with one)"
# a request log of `kvtui proxy` (one request per line): what `kvtui whatif` replays
PROXY_LOG = "a proxy log (kvtui proxy's request log), not a trace"

# (bytes read, total bytes, events so far)
Progress = Callable[[int, int, int], None]
Batch = Callable[[list[dict]], None]


class TraceError(ValueError):
    """A trace line that is not valid; `line` is 1-based."""

    def __init__(self, line: int, message: str):
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


class BatchRejected(Exception):
    """Raised by an `on_batch` callback: event `index` of the batch cannot be used, for `reason`."""

    def __init__(self, index: int, reason: str):
        super().__init__(reason)
        self.index, self.reason = index, reason


@dataclass
class TraceFile:
    """What a reader recovered: the header, every valid event before any error, and the error if one stopped it."""

    header: dict
    events: list[dict] = field(default_factory=list)
    error: TraceError | None = None
    truncated_tail: bool = False
    # allow_unknown: kept, skipped by the reducer
    unknown_types: dict[str, int] = field(default_factory=dict)


def skipped_warnings(loaded: TraceFile, source: str) -> list[str]:
    """What the tolerant reader skipped without stopping, one line each: replay's notices, stats' and export's
    warnings (a bad line that stopped the reading is the caller's to say)."""
    out = []
    if loaded.truncated_tail:
        out.append(f"{source}: the last line is incomplete (the writer stopped mid-line); ignored")
    if loaded.unknown_types:
        kinds = ", ".join(f"{k} ({n})" for k, n in sorted(loaded.unknown_types.items()))
        out.append(f"{source}: event types this kvtui does not know were skipped: {kinds}")
    return out


def read_trace(
    path: str | Path,
    *,
    strict: bool = False,
    allow_unknown: bool = False,
    progress: Progress | None = None,
    on_batch: Batch | None = None,
) -> TraceFile:
    """Read a trace file (see the module docstring for the modes)."""
    total = os.path.getsize(path)
    reader = _Reader(strict, allow_unknown, on_batch)
    try:
        with open_binary(path) as handle:
            if progress is not None and decompressing(handle):
                # a compressed file: how far into the file on disk, not into what it holds
                shown = progress

                def progress(done: int, total: int, events: int) -> None:
                    shown(min(read_position(handle), total), total, events)

            return reader.run(_blocks(handle), total, progress)
    except CompressedFileError as exc:
        error = TraceError(0, exc.reason)
        if strict:
            raise error from None
        reader.out.error = reader.out.error or error
        return reader.out


def parse_trace_lines(
    lines: Iterable[str | bytes], *, strict: bool = False, allow_unknown: bool = False
) -> TraceFile:
    """The same reader over lines in memory (each with its newline, as a file yields them)."""
    data = b"".join(line.encode("utf-8") if isinstance(line, str) else line for line in lines)
    return _Reader(strict, allow_unknown, None).run(iter([data]) if data else iter(()), len(data), None)


def read_header(path: str | Path) -> tuple[dict | None, TraceError | None]:
    """The first line only: lets a command refuse a file that is not a trace before doing anything else."""
    try:
        with open_binary(path) as handle:
            first = handle.readline(MAX_LINE_BYTES)
    except CompressedFileError as exc:
        return None, TraceError(0, exc.reason)
    trace = _Reader(False, False, None)
    trace.run(iter([first.rstrip(b"\r\n") + b"\n"]) if first.strip() else iter(()), len(first), None)
    return (None, trace.out.error) if trace.out.error is not None else (trace.out.header, None)


def _blocks(handle) -> Iterable[bytes]:
    while True:
        block = handle.read(CHUNK_BYTES)
        if not block:
            return
        yield block


class _Reader:
    def __init__(self, strict: bool, allow_unknown: bool, on_batch: Batch | None):
        self.strict, self.allow_unknown, self.on_batch = strict, allow_unknown, on_batch
        self.out = TraceFile(header={})
        self.header: dict | None = None
        self.last_seq: int | None = None
        # lines consumed so far
        self.line_no = 0
        # a bad line after good ones in the same block
        self._pending_error: TraceError | None = None

    def run(self, blocks: Iterable[bytes], total: int, progress: Progress | None) -> TraceFile:
        enabled = gc.isenabled()
        gc.disable()
        try:
            self._run(blocks, total, progress)
        finally:
            if enabled:
                gc.enable()
        out = self.out
        if self.header is None and out.error is None:
            out.error = TraceError(1, EMPTY_FILE)
        if self.strict and out.error is not None:
            raise out.error
        return out

    def _run(self, blocks: Iterable[bytes], total: int, progress: Progress | None) -> None:
        # pieces of a line not finished yet
        pending: list[bytes] = []
        pending_len = done = 0
        for block in blocks:
            done += len(block)
            cut = block.rfind(b"\n")
            if cut < 0:
                pending.append(block)
                pending_len += len(block)
                if pending_len > MAX_LINE_BYTES:
                    return self._fail(
                        self.line_no + 1,
                        f"line longer than {MAX_LINE_BYTES >> 20} MiB: not a "
                        "trace event (is this a trace file?)",
                    )
                continue
            head = block[:cut]
            if pending:
                head = b"".join(pending) + head
            rest = block[cut + 1 :]
            pending, pending_len = ([rest], len(rest)) if rest else ([], 0)
            lines = head.split(b"\n")
            too_long = next((i for i, line in enumerate(lines) if len(line) > MAX_LINE_BYTES), None)
            if too_long is not None:
                self._take(lines[:too_long], last_unterminated=False)
                if self.out.error is None:
                    self._fail(
                        self.line_no + 1, f"line longer than {MAX_LINE_BYTES >> 20} MiB: not a trace event"
                    )
                return
            if not self._take(lines, last_unterminated=False):
                return
            if progress is not None:
                progress(min(done, total), total, len(self.out.events))
        if pending:
            self._take([b"".join(pending)], last_unterminated=True)
            if progress is not None:
                progress(total, total, len(self.out.events))

    def _fail(self, line: int, message: str) -> bool:
        self.out.error = TraceError(line, message)
        return False

    def _take(self, lines: list[bytes], last_unterminated: bool) -> bool:
        """Parse and check a run of complete lines (the last maybe without its newline); False once stopped."""
        first_line = self.line_no + 1
        self.line_no += len(lines)
        if self.header is None:
            while lines and not lines[0].strip():
                lines, first_line = lines[1:], first_line + 1
            if not lines:
                return True
            if not self._take_header(lines[0], first_line, last_unterminated and len(lines) == 1):
                return False
            lines, first_line = lines[1:], first_line + 1
            if not lines:
                return True
        try:
            parsed = json.loads(b"[" + b",".join(lines) + b"]")
            # line of event i: first_line + i (no blank lines, since the whole block parsed)
            numbers = None
            # a line holding two values ("{...},{...}"): find it
            if len(parsed) != len(lines):
                raise ValueError
        except (ValueError, RecursionError):
            parsed, numbers = self._parse_one_by_one(lines, first_line, last_unterminated)
        return self._check(parsed, numbers, first_line)

    def _take_header(self, raw: bytes, number: int, unterminated: bool) -> bool:
        try:
            # decoded here: json.loads of bytes would take a UTF-16 or UTF-32 file as text (a UTF-8 BOM is fine)
            header = json.loads(raw.decode("utf-8-sig"))
        except (ValueError, RecursionError) as exc:
            # bytes that are not text are a binary file, not a header cut short
            if unterminated and not isinstance(exc, UnicodeDecodeError):
                self.out.truncated_tail = True
                return self._fail(number, "the header line is incomplete")
            return self._fail(number, _json_problem(exc))
        problem = validate_header(header)
        if problem and _is_proxy_log_line(header):
            problem = PROXY_LOG
        if problem:
            return self._fail(number, problem)
        self.header = self.out.header = header
        return True

    def _parse_one_by_one(self, lines: list[bytes], first_line: int, last_unterminated: bool):
        parsed, numbers = [], []
        for j, raw in enumerate(lines):
            if not raw.strip():
                continue
            try:
                parsed.append(json.loads(raw.decode("utf-8")))
                numbers.append(first_line + j)
            except (ValueError, RecursionError) as exc:
                if last_unterminated and j == len(lines) - 1:
                    self.out.truncated_tail = True
                else:
                    self._pending_error = TraceError(first_line + j, _json_problem(exc))
                break
        return parsed, numbers

    def _check(self, parsed: list, numbers: list[int] | None, first_line: int) -> bool:
        checks, unknown = FAST_CHECKS, self.out.unknown_types
        last = self.last_seq
        good: list[dict] = []
        problem = None
        for i, event in enumerate(parsed):
            etype = event.get("type") if type(event) is dict else None
            check = checks.get(etype) if type(etype) is str else None
            if check is None or not check(event):
                problem = self._why(event)
                # an unknown type, allowed
                if problem is None:
                    unknown[event["type"]] = unknown.get(event["type"], 0) + 1
            if problem is None:
                seq = event["seq"]
                if last is not None and seq != last + 1:
                    problem = (
                        f"seq {seq} does not follow {last}"
                        if seq <= last
                        else f"seq {seq} follows {last}: {seq - last - 1} event(s) missing before this line"
                    )
            if problem is not None:
                self._stop_at(good, numbers, first_line, i, problem)
                return False
            last = event["seq"]
            good.append(event)
        self.last_seq = last
        if not self._hand_over(good, numbers, first_line):
            return False
        if self._pending_error is not None:
            self.out.error = self._pending_error
            return False
        return not self.out.truncated_tail

    def _why(self, event) -> str | None:
        """Why a line failed the fast check (None: an unknown type that allow_unknown keeps)."""
        if (
            type(event) is dict
            and self.allow_unknown
            and type(event.get("type")) is str
            and event["type"] not in FAST_CHECKS
        ):
            if type(event.get("seq")) is not int or type(event.get("t")) not in (int, float):
                return f"{event['type']}: an event needs an int seq and a number t"
            return None
        return validate_event(event) or "not a valid event"

    def _stop_at(self, good: list[dict], numbers, first_line: int, i: int, problem: str) -> None:
        self._hand_over(good, numbers, first_line)
        if self.out.error is None:
            self._fail(first_line + i if numbers is None else numbers[i], problem)

    def _hand_over(self, good: list[dict], numbers, first_line: int) -> bool:
        if not good:
            return self.out.error is None
        if self.on_batch is not None:
            try:
                self.on_batch(good)
            except BatchRejected as rejected:
                i = rejected.index
                self.out.events.extend(good[:i])
                self._fail(first_line + i if numbers is None else numbers[i], rejected.reason)
                return False
        self.out.events.extend(good)
        return True


def _is_proxy_log_line(obj) -> bool:
    return isinstance(obj, dict) and "type" not in obj and "prompt_token_ids" in obj


def _json_problem(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at byte {exc.start + 1})"
    if isinstance(exc, json.JSONDecodeError):
        return f"not valid JSON ({exc.msg}, column {exc.colno})"
    if isinstance(exc, RecursionError):
        return "not valid JSON (nested too deeply)"
    return f"not valid JSON ({exc})"
