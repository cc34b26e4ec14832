"""Replay's way of reading a trace: engine.trace's one reader in its tolerant mode, keeping unknown event types.

Replay shows every event before a bad line and says which line stopped it and why; event types this kvtui does
not know (a newer engine) are kept, counted and reported, and the reducer ignores them. `on_batch` folds each
block of events into the timeline while the file loads. Checks are the same as `kvtui stats` and the tests use:
every field of every event (engine/trace/reader.py).
"""

from __future__ import annotations

from engine.trace.reader import (
    Batch,
    BatchRejected,
    Progress,
    TraceError,
    TraceFile,
    read_header,
    read_trace,
    skipped_warnings,
)

__all__ = ["BatchRejected", "LoadedTrace", "TraceError", "load_trace", "read_header", "skipped_warnings"]

# the reader's result (header, events, error, truncated_tail, unknown_types)
LoadedTrace = TraceFile


def load_trace(path: str, progress: Progress | None = None, on_batch: Batch | None = None) -> TraceFile:
    """Read a whole trace, tolerant of a bad line and of unknown event types."""
    return read_trace(path, allow_unknown=True, progress=progress, on_batch=on_batch)
