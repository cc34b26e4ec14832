"""Decoding the wire of each engine, from payloads encoded by msgspec structs declared as the engines do."""

from __future__ import annotations

import msgspec
import pytest

from engine.trace.attach_structs import KvBlockStored
from kvtui.sources import wire
from kvtui.sources.wire import MAX_PAYLOAD_BYTES, WireError, decode_payload, decode_seq, hash_u64
from tests.kvtui.sources.attach_publishers import (
    OldBlockRemoved,
    OldBlockStored,
    SAllBlocksCleared,
    SBatch,
    SBlockRemoved,
    SBlockStored,
    VAllBlocksCleared,
    VBatch,
    VBlockRemoved,
    VBlockStored,
)

enc = msgspec.msgpack.encode
# vLLM's u64 hashes are often >= 2^63
BIG = (1 << 64) - 5


def test_vllm_map_layout_with_u64_and_bytes_hashes():
    raw = bytes(range(32))
    batch = decode_payload(
        enc(
            VBatch(
                1.5,
                [
                    VBlockStored(
                        [BIG, raw],
                        None,
                        list(range(8)),
                        4,
                        None,
                        "GPU",
                        None,
                        group_idx=1,
                        lookahead_token_ids=[[1], [2]],
                    ),
                    VBlockRemoved([BIG], "GPU", group_idx=1),
                    VAllBlocksCleared(),
                ],
                3,
            )
        )
    )
    assert batch.layout == "map" and batch.rank == 3 and batch.ts == 1.5 and batch.blocks == 3
    stored, removed, cleared = batch.events
    assert stored.hashes == [BIG, int.from_bytes(raw[-8:], "big")]
    # the trace: 16 hex digits
    assert stored.as_dict()["hashes"] == [f"{BIG:016x}", raw[-8:].hex()]
    assert stored.parent is None and stored.token_ids == list(range(8)) and stored.group == 1
    assert {k: v for k, v in removed.as_dict().items() if k in ("type", "hashes", "medium", "group")} == {
        "type": "kv_block_removed",
        "hashes": [f"{BIG:016x}"],
        "medium": "GPU",
        "group": 1,
    }
    assert type(cleared).__name__ == "AllBlocksCleared"


def test_vllm_bytes_hash_equals_its_int_form():
    """vLLM's int mode is the last 8 bytes of the SHA-256 digest: both forms name the same block."""
    digest = bytes(range(100, 132))
    assert hash_u64(digest) == hash_u64(int.from_bytes(digest, "big") & ((1 << 64) - 1))


def test_vllm_old_array_layout_with_trailing_extras():
    payload = enc(
        VBatch(
            2.0,
            [
                OldBlockStored([7, 8], 6, [1, 2, 3, 4], 2, None, "GPU", "adapter", group_idx=0),
                OldBlockRemoved([7], "CPU"),
            ],
            None,
        )
    )
    batch = decode_payload(payload)
    assert batch.layout == "array" and batch.rank is None
    stored, removed = batch.events
    assert stored.hashes == [7, 8] and stored.parent == 6
    assert (
        stored.as_dict()["hashes"] == [f"{7:016x}", f"{8:016x}"] and stored.as_dict()["parent"] == f"{6:016x}"
    )
    assert stored.lora == "adapter" and stored.block_size == 2
    assert removed.medium == "CPU" and removed.group == 0
    # a newer publisher's extra trailing elements are ignored
    longer = msgspec.msgpack.decode(payload)
    longer[1][0] = longer[1][0] + [None] * (12 - len(longer[1][0])) + ["future"]
    assert decode_payload(enc(longer)).events[0].hashes == stored.hashes


def test_sglang_signed_hashes_token_pairs_and_salt():
    batch = decode_payload(
        enc(
            SBatch(
                3.0,
                [
                    SBlockStored([-2], -1, [[5, 6], [6, 7]], 2, None, medium="GPU", cache_salt="tenant-a"),
                    SBlockRemoved([-2, 9]),
                    SAllBlocksCleared(),
                ],
                1,
            )
        )
    )
    stored, removed, _ = batch.events
    assert (
        stored.as_dict()["hashes"] == ["fffffffffffffffe"]
        and stored.as_dict()["parent"] == "ffffffffffffffff"
    )
    assert stored.token_ids == [5, 6] and stored.token_pairs and stored.salt == "tenant-a"
    assert removed.hashes == [(1 << 64) - 2, 9] and removed.group == 0


def test_unknown_keys_and_event_types_are_skipped():
    batch = decode_payload(
        enc(
            [
                0.0,
                [
                    {"type": "BlockRemoved", "block_hashes": [1], "new_field": {"x": 1}},
                    {"type": "BlockTeleported", "block_hashes": [2]},
                ],
                0,
            ]
        )
    )
    assert [e.as_dict()["type"] for e in batch.events] == ["kv_block_removed"]
    # a rank left out (omit_defaults)
    assert decode_payload(enc([0.0, []])).rank is None


@pytest.mark.parametrize(
    "payload, words",
    [
        (b"\xc1garbage", "not msgpack"),
        (enc({"ts": 1}), "not an array"),
        (
            enc(
                [
                    0.0,
                    [
                        {
                            "type": "BlockStored",
                            "block_hashes": [1],
                            "parent_block_hash": None,
                            "token_ids": [1],
                            "block_size": 4,
                            "lora_id": None,
                            "medium": None,
                            "lora_name": None,
                        }
                    ],
                ]
            ),
            "1 token ids for 1 blocks",
        ),
        (enc([0.0, [{"type": "BlockRemoved", "block_hashes": [1.5]}]]), "integer or bytes"),
        (enc([0.0, [7]]), "neither a tagged map"),
        (enc(["now", []]), "timestamp"),
        # msgspec recursing
        (b"\x92\xcb" + b"\x00" * 8 + b"\x91" * 100_000 + b"\xc0", "nested too deeply"),
        (
            enc(
                [
                    0.0,
                    [
                        {
                            "type": "BlockStored",
                            "block_hashes": [1],
                            "parent_block_hash": None,
                            "token_ids": [1],
                            "block_size": 1,
                            "lora_id": None,
                            "extra_keys": 5,
                        }
                    ],
                ]
            ),
            "extra_keys is not an array",
        ),
    ],
)
def test_malformed_payloads_say_what_is_wrong(payload, words):
    with pytest.raises(WireError, match=words):
        decode_payload(payload)


def test_oversized_and_bad_sequence_frames():
    with pytest.raises(WireError, match="oversized"):
        decode_payload(b"\x00" * (MAX_PAYLOAD_BYTES + 1))
    with pytest.raises(WireError, match="8"):
        decode_seq(b"\x00\x01")
    assert decode_seq((41).to_bytes(8, "big")) == 41


def test_sglang_without_pairs_takes_the_fast_path_with_the_same_result():
    """SGLang's plain int64 hashes decode in C (no general path), masked to u64 as the general path does."""
    payload = enc(SBatch(0.0, [SBlockStored([-2, 3], -1, [1, 2, 3, 4], 2, None, "GPU", cache_salt="s")], 0))
    # decoded by msgspec in C
    assert wire._fast(payload) is not None
    plain = decode_payload(payload)
    slow = decode_payload(
        enc(
            [
                0.0,
                [
                    {
                        "type": "BlockStored",
                        "block_hashes": [-2, 3],
                        "parent_block_hash": -1,
                        "token_ids": [[1, 0], [2, 0], [3, 0], [4, 0]],
                        "block_size": 2,
                        "lora_id": None,
                        "medium": "GPU",
                        "cache_salt": "s",
                    }
                ],
                0,
            ]
        )
    )
    fast, general = plain.events[0].as_dict(), slow.events[0].as_dict()
    assert general.pop("token_pairs") is True
    assert fast == general and fast["hashes"] == ["fffffffffffffffe", f"{3:016x}"]


def test_fields_the_wire_cannot_set():
    """A publisher's keys named like our own fields (seq, worker, texts) are not ours: they are ignored."""
    batch = decode_payload(
        enc(
            [
                0.0,
                [
                    {
                        "type": "BlockRemoved",
                        "block_hashes": [1],
                        "seq": 7,
                        "worker": "x",
                        "texts": ["y"],
                        "t": 9.0,
                    }
                ],
                0,
            ]
        )
    )
    (removed,) = batch.events
    assert (removed.seq, removed.worker, removed.t) == (0, "", 0.0)
    assert (
        decode_payload(
            enc(
                [
                    0.0,
                    [
                        {
                            "type": "BlockStored",
                            "block_hashes": [1],
                            "parent_block_hash": None,
                            "token_ids": [1],
                            "block_size": 1,
                            "lora_id": 3,
                            "texts": ["y"],
                        }
                    ],
                ]
            )
        )
        .events[0]
        .as_dict()["lora"]
        == "3"
    )


def test_a_trace_event_reads_back_to_the_same_struct():
    (stored,) = decode_payload(
        enc(
            VBatch(
                0.0,
                [VBlockStored([BIG, 5], 4, [1, 2], 1, None, "CPU", "a", extra_keys=[("a", b"\x01"), None])],
                0,
            )
        )
    ).events
    assert isinstance(stored, KvBlockStored) and stored.extra_keys == [["a", "01"], None]
    written = stored.as_dict()
    # trace -> struct -> trace: nothing changes
    assert KvBlockStored.from_dict(written).as_dict() == written
