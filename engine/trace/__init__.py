"""The trace: a versioned JSON Lines stream of every fact about the KV cache. Torch-free.

Line 1 is a header (schema version, model shape, block size, pool size, bytes per block, per-layer windows);
every later line is one event with `seq` (monotonic from 0), `t` (seconds since the engine started) and
`type`. Token ids always travel with their text, so a replay needs no tokenizer.
    writer.py         TraceSink (numbers, stamps, hands on) and TraceWriter (the file)
    reader.py         the one reader: strict, or tolerant of a bad line (keeps what came before, says which line)
    opening.py        a command opening a trace: the reader, and one wording for what is wrong with the file
    compressed.py     opening any trace or workload file, plain or zstd-compressed (decompressed as it is read)
    schema.py         the header's fields, validation, `kvtui schema`; the events: engine_events.py, what the
                      engine records, and attach_events.py, what `kvtui attach` records
    attach_structs.py the two attach events nearly every message is made of, as msgspec structs
    metrics.py        hit rates and latency percentiles; stats.py, `kvtui stats` over a whole trace
"""

from engine.trace.reader import (
    TRUNCATED_TAIL_NOTE,
    BatchRejected,
    TraceError,
    TraceFile,
    parse_trace_lines,
    read_header,
    read_trace,
)
from engine.trace.schema import EVENT_FIELDS, SCHEMA_VERSION, schema_text, validate_event, validate_header
from engine.trace.writer import Listener, TraceSink, TraceWriter

__all__ = [
    "EVENT_FIELDS",
    "SCHEMA_VERSION",
    "TRUNCATED_TAIL_NOTE",
    "BatchRejected",
    "Listener",
    "TraceError",
    "TraceFile",
    "TraceSink",
    "TraceWriter",
    "parse_trace_lines",
    "read_header",
    "read_trace",
    "schema_text",
    "validate_event",
    "validate_header",
]
