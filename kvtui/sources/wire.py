"""The KV-event wire of vLLM and SGLang, decoded into attach events (no engine code, no torch).

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
signed int64. All become u64 ints (bytes: their last 8 bytes, as vLLM's own int conversion does), written as 16
hex digits. SGLang's EAGLE caches store token pairs (token, next token): the first of each pair is the token at
that position. We never recompute an engine's hashes: prompts are matched by the token ids in the chain.

Tiers: `medium` says where the blocks are (vLLM GPU / CPU / STORAGE, SGLang GPU / CPU_PINNED / DISK / EXTERNAL),
and vLLM's offloading connectors add `locality` (LOCAL / REMOTE) and `ownership` (a secondary tier's name). An
offloading tier may store a hash it has no token ids for: vLLM's placeholder (no parent, no token ids, block
size 0) and its CPU offload when the request is gone (no token ids, the block size given). Such a store is kept
(the tier holds that hash), not rejected for its empty token list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from engine.trace.attach_structs import AllBlocksCleared, KvBlockRemoved, KvBlockStored

# the replay stream's end marker
END_SEQ = b"\xff" * 8
# a bigger message is counted as malformed ("oversized") and dropped
MAX_PAYLOAD_BYTES = 32 << 20
U64 = (1 << 64) - 1

_decode = msgspec.msgpack.Decoder().decode
_ARRAY_STORED = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
    "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
)
_ARRAY_REMOVED = ("block_hashes", "medium", "group_idx")


class WireError(ValueError):
    """A message that does not follow the wire format; the text says what was wrong."""


class _MapBatch(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list[KvBlockStored | KvBlockRemoved | AllBlocksCleared]
    rank: int | None = None


_decode_map_batch = msgspec.msgpack.Decoder(_MapBatch).decode


@dataclass
class Batch:
    """A payload decoded: its events checked, hashes u64 ints (engine/trace/attach_structs.py), AllBlocksCleared
    as the struct. Their `worker`, `wire_seq`, `engine_ts` and `t` are the attacher's to fill in (they depend
    on the stream, not the payload), their `seq` the sink's."""

    ts: float
    events: list
    rank: int | None
    # "map", "array" or "empty" (a batch with no events)
    layout: str
    # block hashes in its stored and removed events
    blocks: int = 0


def hash_u64(value: Any) -> int:
    """An engine's block hash as a u64 (ints masked to 64 bits, bytes: their last 8)."""
    if type(value) is int:
        return value & U64
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if not raw:
            raise WireError("an empty block hash")
        return int.from_bytes(raw[-8:], "big")
    raise WireError(f"a block hash must be an integer or bytes, got {type(value).__name__}")


def decode_seq(frame: bytes) -> int:
    if len(frame) != 8:
        raise WireError(f"sequence frame of {len(frame)} bytes (expected 8)")
    return int.from_bytes(frame, "big")


def _fast(payload: bytes) -> Batch | None:
    """The common case (map layout, known events, plain token ids) decoded and type-checked in C by msgspec,
    then checked and normalised in one pass; None sends the payload down the general path (array layout, token
    pairs, unknown events, anything odd), which raises the error a person can read."""
    try:
        batch = _decode_map_batch(payload)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    blocks = 0
    for e in batch.events:
        cls = type(e)
        if cls is AllBlocksCleared:
            continue
        hashes = e.hashes
        if cls is KvBlockStored:
            size, tokens = e.block_size, e.token_ids
            if tokens and sparse_window_store(tokens, size, hashes):
                e.token_ids = tokens = []
            if (size <= 0 or len(tokens) != size * len(hashes)) if tokens else size < 0:
                return None
            parent = e.parent
            if parent is not None and (type(parent) is not int or parent < 0):
                if not parent:
                    return None
                e.parent = hash_u64(parent)
            if e.lora is None and e.lora_id is not None:
                e.lora = str(e.lora_id)
            if e.extra_keys:
                e.extra_keys = _jsonable(e.extra_keys)
        # vLLM's u64 ints need nothing; SGLang's negative ones and raw bytes do
        for h in hashes:
            if type(h) is not int or h < 0:
                if not h:
                    return None
                e.hashes = [hash_u64(x) for x in hashes]
                break
        blocks += len(hashes)
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
    except RecursionError:
        raise WireError("payload is nested too deeply") from None
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
    out = [e for e in map(normalise_event, events) if e is not None]
    layout = "empty" if not events else ("map" if isinstance(events[0], dict) else "array")
    blocks = sum(len(e.hashes) for e in out if type(e) is not AllBlocksCleared)
    return Batch(float(ts), out, rank, layout, blocks)


def normalise_event(raw: Any) -> KvBlockStored | KvBlockRemoved | AllBlocksCleared | None:
    """One wire event (a tagged map or a tagged array), checked and normalised; None for an event type this
    kvtui does not know (a newer engine), which is skipped."""
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
        return KvBlockRemoved(
            _hashes(fields),
            _opt_str(fields, "medium"),
            _group(fields),
            _opt_str(fields, "locality"),
            _opt_str(fields, "ownership"),
        )
    if tag == "AllBlocksCleared":
        return AllBlocksCleared()
    if not isinstance(tag, str):
        raise WireError(f"event tag is not a string: {tag!r}")
    return None


def _stored(f: dict) -> KvBlockStored:
    hashes = _hashes(f)
    parent = f.get("parent_block_hash")
    tokens = f.get("token_ids")
    if not isinstance(tokens, list):
        raise WireError("BlockStored: token_ids is not an array")
    pairs = bool(tokens) and isinstance(tokens[0], list)
    # SGLang EAGLE: (token, next token) per position
    if pairs:
        tokens = [t[0] if isinstance(t, list) and t else t for t in tokens]
    if not all(type(t) is int for t in tokens):
        raise WireError("BlockStored: token_ids holds something other than integers")
    size = f.get("block_size")
    # a store without token ids (an offloading tier's placeholder) may say 0
    if type(size) is not int or size < 0 or (size == 0 and tokens):
        raise WireError(f"BlockStored: block_size is not a positive integer: {size!r}")
    if tokens and sparse_window_store(tokens, size, hashes):
        tokens = []
    if tokens and len(tokens) != size * len(hashes):
        raise WireError(f"BlockStored: {len(tokens)} token ids for {len(hashes)} blocks of {size}")
    lora, lora_id, window = f.get("lora_name"), f.get("lora_id"), f.get("kv_cache_spec_sliding_window")
    lora_id = lora_id if type(lora_id) is int else None
    extra = f.get("extra_keys")
    if extra is not None and not isinstance(extra, list):
        raise WireError(f"BlockStored: extra_keys is not an array: {str(extra)[:40]}")
    return KvBlockStored(
        hashes,
        None if parent is None else hash_u64(parent),
        tokens,
        size,
        lora_id,
        _opt_str(f, "medium"),
        lora if isinstance(lora, str) else (None if lora_id is None else str(lora_id)),
        _opt_str(f, "cache_salt"),
        _jsonable(extra) if extra else None,
        _group(f),
        _opt_str(f, "kv_cache_spec_kind"),
        window if type(window) is int else None,
        token_pairs=pairs,
        locality=_opt_str(f, "locality"),
        ownership=_opt_str(f, "ownership"),
    )


def sparse_window_store(tokens: list, size, hashes: list) -> bool:
    """vLLM 0.32's store of a window or Mamba group under sparse retention: the token ids of every block from
    the first newly full one to the last, the hashes of only the blocks it kept (which ones, it does not say).
    Such a store is read as hashes without token ids."""
    return type(size) is int and size > 0 and len(tokens) > size * len(hashes) and len(tokens) % size == 0


def _hashes(f: dict) -> list[int]:
    hashes = f.get("block_hashes")
    if not isinstance(hashes, list):
        raise WireError("block_hashes is not an array")
    return [hash_u64(h) for h in hashes]


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
