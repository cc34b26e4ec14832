"""The KV-event wire of vLLM and SGLang, decoded into plain records (no engine code, no torch).

A publisher's PUB socket sends three frames per message: the topic, the sequence number (8 bytes big-endian,
from 0 per publisher; a restart starts again at 0) and a msgpack payload `[ts, events, rank]`. The rank is
vLLM's `data_parallel_rank` or SGLang's `attn_dp_rank`, and may be nil (or, with msgspec's omit_defaults,
missing). Each event is a tagged union in one of two layouts:

  map    vLLM >= 0.24 and SGLang 0.5.23: {"type": "BlockStored", field: value, ...}; fields at their default
         are left out, unknown keys are ignored;
  array  vLLM <= 0.23: ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
         lora_name, extra_keys, group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window]; trailing elements
         past these are ignored, missing trailing ones take their defaults.

Hashes are opaque. vLLM sends a u64 (the last 8 bytes of a SHA-256, often >= 2^63) or the raw bytes; SGLang a
signed int64. All become u64 (bytes: their last 8 bytes, as vLLM's own int conversion does), written as 16 hex
digits. SGLang's EAGLE caches store token pairs (token, next token): the first of each pair is the token at
that position. We never recompute an engine's hashes: prompts are matched by the token ids in the chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Union

import msgspec

END_SEQ = b"\xff" * 8  # the replay stream's end marker
MAX_PAYLOAD_BYTES = 32 << 20  # a bigger message is counted as malformed ("oversized") and dropped
U64 = (1 << 64) - 1

_decode = msgspec.msgpack.Decoder().decode
_ARRAY_STORED = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
                 "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window")
_ARRAY_REMOVED = ("block_hashes", "medium", "group_idx")


class WireError(ValueError):
    """A message that does not follow the wire format; the text says what was wrong."""


# The records a payload decodes to: the map layout straight from msgspec (in C), the other layouts built by
# `normalise_event`. Either way they leave `decode_payload` checked and normalised: hashes as 16 hex digits,
# token ids plain ints. gc=False as in vLLM's own structs (they never take part in a cycle).
class Stored(msgspec.Struct, tag="BlockStored", gc=False):
    block_hashes: list[Union[int, bytes]]  # on the wire int or bytes; after decode_payload hex strings
    parent_block_hash: Union[int, bytes, None]  # likewise
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int] = None
    medium: Optional[str] = None
    lora_name: Optional[str] = None
    cache_salt: Optional[str] = None
    extra_keys: Optional[list] = None
    group_idx: Optional[int] = None
    kv_cache_spec_kind: Optional[str] = None
    kv_cache_spec_sliding_window: Optional[int] = None
    token_pairs: bool = False  # not on the wire: SGLang's (token, next token) pairs were flattened


class Removed(msgspec.Struct, tag="BlockRemoved", gc=False):
    block_hashes: list[Union[int, bytes]]
    medium: Optional[str] = None
    group_idx: Optional[int] = None


class Cleared(msgspec.Struct, tag="AllBlocksCleared", gc=False):
    pass


class _MapBatch(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list[Union[Stored, Removed, Cleared]]
    rank: Optional[int] = None


_decode_map_batch = msgspec.msgpack.Decoder(_MapBatch).decode


@dataclass
class Batch:
    ts: float
    records: list  # Stored | Removed | Cleared, checked and normalised
    rank: int | None
    layout: str  # "map", "array" or "empty" (a batch with no events)
    blocks: int = 0  # block hashes in its stored and removed records


def hash_hex(value: Any) -> str:
    """An engine's block hash as 16 hex digits of a u64 (ints masked to 64 bits, bytes: their last 8)."""
    if type(value) is int:
        return f"{value & U64:016x}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if not raw:
            raise WireError("an empty block hash")
        return f"{int.from_bytes(raw[-8:], 'big'):016x}"
    raise WireError(f"a block hash must be an integer or bytes, got {type(value).__name__}")


def decode_seq(frame: bytes) -> int:
    if len(frame) != 8:
        raise WireError(f"sequence frame of {len(frame)} bytes (expected 8)")
    return int.from_bytes(frame, "big")


def _fast(payload: bytes) -> Batch | None:
    """The common case (map layout, known events, plain token ids) decoded and type-checked in C by msgspec, then
    checked and its hashes normalised here; None sends the payload down the general path (array layout, token
    pairs, unknown events, anything odd), which raises the error a person can read."""
    try:
        batch = _decode_map_batch(payload)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    blocks = 0
    try:
        for r in batch.events:
            if type(r) is Cleared:
                continue
            hashes = r.block_hashes
            if type(r) is Stored:
                size = r.block_size
                if size <= 0 or len(r.token_ids) != size * len(hashes):
                    return None
                parent = r.parent_block_hash
                if parent is not None:
                    r.parent_block_hash = f"{parent & U64:016x}" if type(parent) is int else hash_hex(parent)
            r.block_hashes = [f"{h & U64:016x}" if type(h) is int else hash_hex(h) for h in hashes]
            blocks += len(hashes)
    except WireError:  # an empty bytes hash
        return None
    return Batch(batch.ts, batch.events, batch.rank, "map" if batch.events else "empty", blocks)


def decode_payload(payload: bytes) -> Batch:
    """One message's payload: `[ts, events, rank]`, events in either layout (see the module doc)."""
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise WireError(f"oversized payload ({len(payload):,} bytes > {MAX_PAYLOAD_BYTES:,})")
    fast = _fast(payload)
    if fast is not None:
        return fast
    try:
        obj = _decode(payload)
    except (msgspec.DecodeError, ValueError) as exc:
        raise WireError(f"payload is not msgpack ({exc})") from None
    if not isinstance(obj, list) or len(obj) < 2:
        raise WireError("payload is not an array [ts, events, rank]")
    ts, events = obj[0], obj[1]
    rank = obj[2] if len(obj) > 2 else None
    if not isinstance(ts, (int, float)) or isinstance(ts, bool):
        raise WireError(f"batch timestamp is not a number: {ts!r}")
    if not isinstance(events, list):
        raise WireError("batch events is not an array")
    if rank is not None and type(rank) is not int:
        raise WireError(f"batch rank is not an integer or nil: {rank!r}")
    records = [r for r in map(normalise_event, events) if r is not None]
    layout = "empty" if not events else ("map" if isinstance(events[0], dict) else "array")
    blocks = sum(len(r.block_hashes) for r in records if type(r) is not Cleared)
    return Batch(float(ts), records, rank, layout, blocks)


def normalise_event(raw: Any) -> Stored | Removed | Cleared | None:
    """One wire event (a tagged map or a tagged array) as a checked, normalised record; None for an event type
    this kvtui does not know (a newer engine), which is skipped."""
    if isinstance(raw, dict):
        tag, fields = raw.get("type"), raw
    elif isinstance(raw, list) and raw and isinstance(raw[0], str):
        tag = raw[0]
        names = _ARRAY_STORED if tag == "BlockStored" else _ARRAY_REMOVED if tag == "BlockRemoved" else ()
        fields = dict(zip(names, raw[1:]))
    else:
        raise WireError(f"an event is neither a tagged map nor a tagged array: {str(raw)[:60]}")
    if tag == "BlockStored":
        return _stored(fields)
    if tag == "BlockRemoved":
        return Removed(_hashes(fields), _opt_str(fields, "medium"), _group(fields))
    if tag == "AllBlocksCleared":
        return Cleared()
    if not isinstance(tag, str):
        raise WireError(f"event tag is not a string: {tag!r}")
    return None


def _stored(f: dict) -> Stored:
    hashes = _hashes(f)
    parent = f.get("parent_block_hash")
    tokens = f.get("token_ids")
    if not isinstance(tokens, list):
        raise WireError("BlockStored: token_ids is not an array")
    pairs = bool(tokens) and isinstance(tokens[0], list)
    if pairs:  # SGLang EAGLE: (token, next token) per position
        tokens = [t[0] if isinstance(t, list) and t else t for t in tokens]
    if not all(type(t) is int for t in tokens):
        raise WireError("BlockStored: token_ids holds something other than integers")
    size = f.get("block_size")
    if type(size) is not int or size <= 0:
        raise WireError(f"BlockStored: block_size is not a positive integer: {size!r}")
    if len(tokens) != size * len(hashes):
        raise WireError(f"BlockStored: {len(tokens)} token ids for {len(hashes)} blocks of {size}")
    lora, lora_id, window = f.get("lora_name"), f.get("lora_id"), f.get("kv_cache_spec_sliding_window")
    return Stored(hashes, None if parent is None else hash_hex(parent), tokens, size,
                  lora_id if type(lora_id) is int else None, _opt_str(f, "medium"),
                  lora if isinstance(lora, str) else None, _opt_str(f, "cache_salt"),
                  f.get("extra_keys") or None, _group(f), _opt_str(f, "kv_cache_spec_kind"),
                  window if type(window) is int else None, pairs)


def attach_event(record: Stored | Removed | Cleared, worker: str, wire_seq: int, engine_ts: float,
                 t: float) -> dict:
    """A record as an attach trace event (engine/attach_schema.py); `seq` is the sink's to number."""
    if type(record) is Stored:
        r = record
        event = {"seq": 0, "t": t, "type": "kv_block_stored", "worker": worker, "wire_seq": wire_seq,
                 "engine_ts": engine_ts, "hashes": r.block_hashes, "parent": r.parent_block_hash,
                 "token_ids": r.token_ids, "block_size": r.block_size, "medium": r.medium,
                 "group": r.group_idx or 0,
                 "lora": r.lora_name if r.lora_name is not None else (None if r.lora_id is None else str(r.lora_id)),
                 "salt": r.cache_salt}
        if r.extra_keys:
            event["extra_keys"] = _jsonable(r.extra_keys)
        if r.kv_cache_spec_kind is not None:
            event["spec_kind"] = r.kv_cache_spec_kind
        if r.kv_cache_spec_sliding_window is not None:
            event["sliding_window"] = r.kv_cache_spec_sliding_window
        if r.token_pairs:
            event["token_pairs"] = True
        return event
    if type(record) is Removed:
        return {"seq": 0, "t": t, "type": "kv_block_removed", "worker": worker, "hashes": record.block_hashes,
                "group": record.group_idx or 0, "medium": record.medium, "wire_seq": wire_seq,
                "engine_ts": engine_ts}
    return {"seq": 0, "t": t, "type": "kv_all_cleared", "worker": worker, "cause": "cleared"}


def _hashes(f: dict) -> list[str]:
    hashes = f.get("block_hashes")
    if not isinstance(hashes, list):
        raise WireError("block_hashes is not an array")
    return [hash_hex(h) for h in hashes]


def _group(f: dict) -> int:
    group = f.get("group_idx")
    return group if type(group) is int else 0


def _opt_str(f: dict, key: str) -> str | None:
    value = f.get(key)
    return value if isinstance(value, str) else None


def _jsonable(value: Any) -> Any:
    """extra_keys (LoRA names, (mm id, offset) pairs, salts, embedding digests) made JSON-safe: bytes as hex."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (int, float, str, bool)):
        return value
    return str(value)
