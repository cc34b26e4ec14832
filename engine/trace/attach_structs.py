"""The two events nearly every attach message is made of, `kv_block_stored` and `kv_block_removed`, as msgspec
structs: decoded straight from vLLM's / SGLang's msgpack (in C: msgspec reads the wire's field names through
`rename`), folded by `FleetState`, and written as the dicts engine/trace/attach_events.py lists (`as_dict`).

Why structs and not dicts: at 100k blocks a second a 2-core machine has ~10 us per block for everything, and a
dict per event (built, filled, read back key by key) was half of it; a struct is built by the decoder and read
by attribute. Hashes are u64 ints here (vLLM's u64 as sent, SGLang's int64 masked, raw bytes: their last 8);
written, they are 16 hex digits (`hash_hex`), and read back from a trace they become ints again (`from_dict`).
Fields the wire does not carry (seq, t, worker, wire_seq, engine_ts, texts, token_pairs) are renamed to keys
no publisher sends, so a message cannot set them.
"""

from __future__ import annotations

import msgspec

_OURS = {
    "seq": "kvtui:seq",
    "t": "kvtui:t",
    "worker": "kvtui:worker",
    "wire_seq": "kvtui:wire_seq",
    "engine_ts": "kvtui:engine_ts",
    "texts": "kvtui:texts",
    "token_pairs": "kvtui:token_pairs",
}


def hash_hex(value: int) -> str:
    return f"{value:016x}"


class _Ours(msgspec.Struct, kw_only=True, gc=False, rename=_OURS):
    """The fields an attach event has and the wire does not (keyword-only: they come after the wire's)."""

    seq: int = 0
    t: float = 0.0
    worker: str = ""
    wire_seq: int = 0
    engine_ts: float = 0.0


class KvBlockStored(
    _Ours,
    tag="BlockStored",
    gc=False,
    rename={
        "hashes": "block_hashes",
        "parent": "parent_block_hash",
        "group": "group_idx",
        "lora": "lora_name",
        "salt": "cache_salt",
        "spec_kind": "kv_cache_spec_kind",
        "sliding_window": "kv_cache_spec_sliding_window",
        **_OURS,
    },
):
    # ints once the decoder has checked them
    hashes: list[int | bytes]
    parent: int | bytes | None
    token_ids: list[int]
    block_size: int
    # the wire's; `lora` is its name, else this id (the decoder sets it)
    lora_id: int | None = None
    medium: str | None = None
    lora: str | None = None
    salt: str | None = None
    extra_keys: list | None = None
    group: int | None = None
    spec_kind: str | None = None
    sliding_window: int | None = None
    texts: list | None = None
    # SGLang's (token, next token) pairs were flattened to tokens
    token_pairs: bool = False
    # vLLM's: LOCAL / REMOTE, and the secondary offloading tier that stored the blocks (kvtui/state/fleet_tiers.py)
    locality: str | None = None
    ownership: str | None = None

    def as_dict(self) -> dict:
        """The event as the trace writes it (engine/trace/attach_events.py)."""
        out = {
            "seq": self.seq,
            "t": self.t,
            "type": "kv_block_stored",
            "worker": self.worker,
            "wire_seq": self.wire_seq,
            "engine_ts": self.engine_ts,
            "hashes": [hash_hex(h) for h in self.hashes],
            "parent": None if self.parent is None else hash_hex(self.parent),
            "token_ids": self.token_ids,
            "block_size": self.block_size,
            "medium": self.medium,
            "group": self.group or 0,
            # the decoder made lora (name, else id) and extra_keys
            "lora": self.lora,
            "salt": self.salt,
        }
        if self.extra_keys:
            out["extra_keys"] = self.extra_keys
        if self.spec_kind is not None:
            out["spec_kind"] = self.spec_kind
        if self.sliding_window is not None:
            out["sliding_window"] = self.sliding_window
        if self.token_pairs:
            out["token_pairs"] = True
        if self.texts is not None:
            out["texts"] = self.texts
        if self.locality is not None:
            out["locality"] = self.locality
        if self.ownership is not None:
            out["ownership"] = self.ownership
        return out

    @classmethod
    def from_dict(cls, e: dict) -> KvBlockStored:
        """A trace's event (hex hashes) as the struct the reducer folds."""
        parent = e.get("parent")
        return cls(
            [int(h, 16) for h in e["hashes"]],
            None if parent is None else int(parent, 16),
            e["token_ids"],
            e["block_size"],
            None,
            e.get("medium"),
            e.get("lora"),
            e.get("salt"),
            e.get("extra_keys"),
            e.get("group", 0),
            e.get("spec_kind"),
            e.get("sliding_window"),
            e.get("texts"),
            bool(e.get("token_pairs")),
            e.get("locality"),
            e.get("ownership"),
            seq=e["seq"],
            t=e["t"],
            worker=e["worker"],
            wire_seq=e.get("wire_seq", 0),
            engine_ts=e.get("engine_ts", 0.0),
        )


class KvBlockRemoved(
    _Ours, tag="BlockRemoved", gc=False, rename={"hashes": "block_hashes", "group": "group_idx", **_OURS}
):
    hashes: list[int | bytes]
    medium: str | None = None
    group: int | None = None
    locality: str | None = None
    ownership: str | None = None

    def as_dict(self) -> dict:
        out = {
            "seq": self.seq,
            "t": self.t,
            "type": "kv_block_removed",
            "worker": self.worker,
            "hashes": [hash_hex(h) for h in self.hashes],
            "group": self.group or 0,
            "medium": self.medium,
            "wire_seq": self.wire_seq,
            "engine_ts": self.engine_ts,
        }
        if self.locality is not None:
            out["locality"] = self.locality
        if self.ownership is not None:
            out["ownership"] = self.ownership
        return out

    @classmethod
    def from_dict(cls, e: dict) -> KvBlockRemoved:
        return cls(
            [int(h, 16) for h in e["hashes"]],
            e.get("medium"),
            e.get("group", 0),
            e.get("locality"),
            e.get("ownership"),
            seq=e["seq"],
            t=e["t"],
            worker=e["worker"],
            wire_seq=e.get("wire_seq", 0),
            engine_ts=e.get("engine_ts", 0.0),
        )


class AllBlocksCleared(msgspec.Struct, tag="AllBlocksCleared", gc=False):
    """Only decoded: the attacher emits it as a `kv_all_cleared` dict (rare)."""
