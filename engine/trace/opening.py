"""A command opening a trace file: the one reader (reader.py) and one wording for what is wrong with the file,
whichever command reads it (`kvtui stats`, `replay`, `export`, `whatif`).

    PATH, line N: what is wrong     a line that stops the reading (line 1: the header), a non-zero exit
    PATH: what is wrong             the file as a whole (empty, unreadable)
    PATH: the last line is ...      a warning: the writer stopped mid-line, the line is ignored, the command runs

A proxy log (one request per line) is not a trace; the line says so and names the command that reads it.
"""

from __future__ import annotations

from pathlib import Path

from engine.trace.reader import (
    EMPTY_FILE,
    PROXY_LOG,
    Batch,
    Progress,
    TraceError,
    TraceFile,
    read_trace,
    skipped_warnings,
)

__all__ = ["EMPTY_FILE", "TraceUnusable", "open_trace", "problem_line", "skipped_warnings"]


class TraceUnusable(ValueError):
    """A trace file a command cannot use; str() is the one line to print."""


def problem_line(path: str | Path, error: TraceError) -> str:
    """The one line every command prints for `error` in the file at `path`."""
    if error.message == PROXY_LOG:
        return f"{path}: {PROXY_LOG}: run `kvtui whatif {path}` on it"
    # an empty file has no line to name; a line 0 is the file as a whole (it could not be read)
    if error.message == EMPTY_FILE or not error.line:
        return f"{path}: {error.message}"
    return f"{path}, line {error.line}: {error.message}"


def open_trace(
    path: str | Path, *, progress: Progress | None = None, on_batch: Batch | None = None
) -> TraceFile:
    """The whole trace (unknown event types kept and counted, a cut last line dropped), or TraceUnusable with
    the one line: the file cannot be read, it is not a trace, or a line in it is bad."""
    try:
        trace = read_trace(path, allow_unknown=True, progress=progress, on_batch=on_batch)
    except OSError as exc:
        raise TraceUnusable(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if trace.error is not None:
        raise TraceUnusable(problem_line(path, trace.error))
    return trace
