"""The trace schema: the header and every event type with its fields, one table (EVENT_FIELDS: the engine's
events, engine/trace/engine_events.py, and an attach trace's, engine/trace/attach_events.py). The single source
of truth that the writer is checked against in tests, the reader validates against, and `kvtui schema` prints.
Torch-free: the viewer reads traces without the engine.
"""

from __future__ import annotations

from typing import Any

from engine.trace.attach_events import ATTACH_EVENT_FIELDS
from engine.trace.engine_events import ENGINE_EVENT_FIELDS

SCHEMA_VERSION = 1
# a header claiming more physical blocks is not a trace a viewer should allocate for
MAX_BLOCKS = 1 << 24

# Field name -> (json types allowed, meaning). "int?" style: the field may be null.
_INT, _FLOAT, _STR, _LIST, _DICT, _BOOL = "int", "float", "str", "list", "dict", "bool"

HEADER_FIELDS: dict[str, tuple[str, str]] = {
    "schema": (_INT, "schema version of this file"),
    "model": (
        _DICT,
        "model shape: name, layers, q_heads, kv_heads, head_dim, dtype, elem_bytes, windows (per layer, null = full)",
    ),
    "block_size": (_INT, "tokens per KV block"),
    "num_blocks": (_INT, "physical blocks in the pool"),
    "bytes_per_block": (
        _INT,
        "KV bytes of one block over all full-attention layers (window_layout='paged': the largest group's)",
    ),
    "bytes_per_token": (_INT, "KV bytes of one token over all full-attention layers"),
    "config": (_DICT, "engine configuration the run used"),
    "kv_dtype": (
        _STR + "?",
        "how K/V are stored: null = the model's dtype (exact); int8 | fp8_e4m3 = one byte a value and a float32 "
        "scale per token and KV head (bytes_per_block and bytes_per_token count the scales)",
    ),
    "kv_groups": (
        _LIST + "?",
        "window_layout='paged': the KV-cache groups sharing the pool, as vLLM forms them, each {kind "
        "(full_attention | sliding_window | index), window, layers}; block events name theirs (`group`)",
    ),
    "table_group": (
        _INT + "?",
        "window_layout='paged': the group whose blocks are the request's block table",
    ),
    "kind": (
        _STR + "?",
        "what made the trace: left out by the engine; attach, whatif (kvtui whatif -o), sinks (kvtui sinks "
        "--trace)",
    ),
    "whatif": (
        _DICT + "?",
        "kvtui whatif -o: capacity_tokens, cost (the cost model), hash_ids (generated tokens never cached), "
        "tokens_per_hash_id (a hash id's run of made-up token ids)",
    ),
    "sinks": (
        _DICT + "?",
        "kvtui sinks --trace: window (W), sink_tokens (S), heavy, recent, layer (the one H2O's ring follows), "
        "every (positions per sample), tokens",
    ),
}

# event type -> field name -> (json type, meaning): what the engine records (engine/trace/engine_events.py), then
# what `kvtui attach` records from vLLM / SGLang publishers (engine/trace/attach_events.py): one file format
EVENT_FIELDS: dict[str, dict[str, tuple[str, str]]] = {**ENGINE_EVENT_FIELDS, **ATTACH_EVENT_FIELDS}


def _type_ok(value: Any, spec: str) -> bool:
    nullable = spec.endswith("?")
    base = spec.rstrip("?")
    if value is None:
        return nullable
    if base == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if base == _FLOAT:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, {_STR: str, _LIST: list, _DICT: dict, _BOOL: bool}[base])


def validate_event(event: Any) -> str | None:
    """Return why `event` is not a valid event, or None when it is."""
    if not isinstance(event, dict):
        return "an event must be a JSON object"
    etype = event.get("type")
    if not isinstance(etype, str) or etype not in EVENT_FIELDS:
        return f"unknown event type {_short(etype)}"
    for key, spec in (("seq", _INT), ("t", _FLOAT)):
        if not _type_ok(event.get(key), spec):
            return f"{etype}: field {key!r} must be {spec}"
    for name, (spec, _) in EVENT_FIELDS[etype].items():
        if name not in event:
            # a nullable field may also be left out
            if spec.endswith("?"):
                continue
            return f"{etype}: missing field {name!r}"
        if not _type_ok(event[name], spec):
            return f"{etype}: field {name!r} must be {spec}, got {_short(event[name])}"
    return None


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text):,} characters)"


def validate_header(header: Any) -> str | None:
    if not isinstance(header, dict) or header.get("type") != "header":
        return 'first line must be the trace header ({"type": "header", ...})'
    if header.get("schema") != SCHEMA_VERSION:
        return f"schema version {header.get('schema')!r} is not supported (this kvtui reads {SCHEMA_VERSION})"
    for name, (spec, _) in HEADER_FIELDS.items():
        # an optional field may be left out (older traces have none)
        if name not in header and spec.endswith("?"):
            continue
        if name not in header or not _type_ok(header[name], spec):
            return f"header: field {name!r} missing or not {spec}"
    for name, low, high in (
        ("block_size", 0, 1 << 16),
        ("num_blocks", 0, MAX_BLOCKS),
        ("bytes_per_block", 0, None),
        ("bytes_per_token", 0, None),
    ):
        value = header[name]
        if value < low or (high is not None and value > high):
            return f"header: {name} {value} is out of range ({low}..{high if high is not None else ''})"
    return None


def schema_text() -> str:
    """The schema as text, printed by `kvtui schema` (docs/trace-format.md comes from the same tables)."""
    out = [
        f"kvtui trace schema version {SCHEMA_VERSION}: JSON Lines, header first, then one event per line.",
        "Every event has seq (int, monotonic), t (float, seconds since start) and type.",
        "A type ending in ? is nullable and may be left out.",
        "",
        "header:",
    ]
    out += [f"  {name:<16} {spec:<6} {doc}" for name, (spec, doc) in HEADER_FIELDS.items()]
    for etype, fields in EVENT_FIELDS.items():
        out += ["", f"{etype}:"]
        out += [f"  {name:<16} {spec:<6} {doc}" for name, (spec, doc) in fields.items()]
    return "\n".join(out)


# --- the fast check: one generated predicate per event type -------------------------------------------------
# validate_event explains a problem; these only answer "valid?" (about 5x faster), so a reader checks every
# event with them and asks validate_event why only for the one that fails.
_PY_TYPES = {
    _INT: ["int"],
    _FLOAT: ["int", "float"],
    _STR: ["str"],
    _LIST: ["list"],
    _DICT: ["dict"],
    _BOOL: ["bool"],
}


def _compile_check(fields: dict[str, tuple[str, str]]):
    terms = ["type(e.get('seq')) is int", "type(e.get('t')) in (int, float)"]
    for name, (spec, _) in fields.items():
        names = _PY_TYPES[spec.rstrip("?")]
        # may be null or left out
        if spec.endswith("?"):
            terms.append(f"type(e.get({name!r})) in ({', '.join(names + ['_NONE'])})")
        else:
            terms.append(f"type(e.get({name!r}, _MISSING)) in ({', '.join(names)},)")
    scope: dict[str, Any] = {"_MISSING": object(), "_NONE": type(None)}
    exec(f"def check(e):\n    return {' and '.join(terms)}\n", scope)  # noqa: S102 (generated from the table)
    return scope["check"]


# type -> predicate(event) -> bool; `type(x) is int` is False for bools, as the schema wants
FAST_CHECKS = {etype: _compile_check(fields) for etype, fields in EVENT_FIELDS.items()}
