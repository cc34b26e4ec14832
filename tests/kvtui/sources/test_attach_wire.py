"""Decoding the wire of each engine, from payloads encoded by msgspec structs declared as the engines do."""

from __future__ import annotations

import msgspec
import pytest
from attach_publishers import (OldBlockRemoved, OldBlockStored, SAllBlocksCleared, SBatch, SBlockRemoved,
                               SBlockStored, VAllBlocksCleared, VBatch, VBlockRemoved, VBlockStored)

from kvtui.sources.wire import MAX_PAYLOAD_BYTES, WireError, decode_payload, decode_seq, hash_hex

enc = msgspec.msgpack.encode
BIG = (1 << 64) - 5  # vLLM's u64 hashes are often >= 2^63


def test_vllm_map_layout_with_u64_and_bytes_hashes():
    raw = bytes(range(32))
    batch = decode_payload(enc(VBatch(1.5, [
        VBlockStored([BIG, raw], None, list(range(8)), 4, None, "GPU", None, group_idx=1,
                     lookahead_token_ids=[[1], [2]]),
        VBlockRemoved([BIG], "GPU", group_idx=1),
        VAllBlocksCleared()], 3)))
    assert batch.layout == "map" and batch.rank == 3 and batch.ts == 1.5
    stored, removed, cleared = batch.events
    assert stored["hashes"] == [f"{BIG:016x}", raw[-8:].hex()]
    assert stored["parent"] is None and stored["token_ids"] == list(range(8)) and stored["group"] == 1
    assert removed == {"kind": "removed", "hashes": [f"{BIG:016x}"], "medium": "GPU", "group": 1}
    assert cleared == {"kind": "cleared"}


def test_vllm_bytes_hash_equals_its_int_form():
    """vLLM's int mode is the last 8 bytes of the SHA-256 digest: both forms name the same block."""
    digest = bytes(range(100, 132))
    assert hash_hex(digest) == hash_hex(int.from_bytes(digest, "big") & ((1 << 64) - 1))


def test_vllm_old_array_layout_with_trailing_extras():
    payload = enc(VBatch(2.0, [OldBlockStored([7, 8], 6, [1, 2, 3, 4], 2, None, "GPU", "adapter", group_idx=0),
                               OldBlockRemoved([7], "CPU")], None))
    batch = decode_payload(payload)
    assert batch.layout == "array" and batch.rank is None
    stored, removed = batch.events
    assert stored["hashes"] == [f"{7:016x}", f"{8:016x}"] and stored["parent"] == f"{6:016x}"
    assert stored["lora"] == "adapter" and stored["block_size"] == 2
    assert removed["medium"] == "CPU" and removed["group"] == 0
    # a newer publisher's extra trailing elements are ignored
    longer = msgspec.msgpack.decode(payload)
    longer[1][0] = longer[1][0] + [None] * (12 - len(longer[1][0])) + ["future"]
    assert decode_payload(enc(longer)).events[0]["hashes"] == stored["hashes"]


def test_sglang_signed_hashes_token_pairs_and_salt():
    batch = decode_payload(enc(SBatch(3.0, [
        SBlockStored([-2], -1, [[5, 6], [6, 7]], 2, None, medium="GPU", cache_salt="tenant-a"),
        SBlockRemoved([-2, 9]), SAllBlocksCleared()], 1)))
    stored, removed, _ = batch.events
    assert stored["hashes"] == ["fffffffffffffffe"] and stored["parent"] == "ffffffffffffffff"
    assert stored["token_ids"] == [5, 6] and stored["token_pairs"] and stored["salt"] == "tenant-a"
    assert removed["hashes"] == ["fffffffffffffffe", f"{9:016x}"] and removed["group"] == 0


def test_unknown_keys_and_event_types_are_skipped():
    batch = decode_payload(enc([0.0, [{"type": "BlockRemoved", "block_hashes": [1], "new_field": {"x": 1}},
                                      {"type": "BlockTeleported", "block_hashes": [2]}], 0]))
    assert [e["kind"] for e in batch.events] == ["removed"]
    assert decode_payload(enc([0.0, []])).rank is None  # a rank left out (omit_defaults)


@pytest.mark.parametrize("payload, words", [
    (b"\xc1garbage", "not msgpack"),
    (enc({"ts": 1}), "not an array"),
    (enc([0.0, [{"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None, "token_ids": [1],
                 "block_size": 4, "lora_id": None, "medium": None, "lora_name": None}]]), "1 token ids for 1 blocks"),
    (enc([0.0, [{"type": "BlockRemoved", "block_hashes": [1.5]}]]), "integer or bytes"),
    (enc([0.0, [7]]), "neither a tagged map"),
    (enc(["now", []]), "timestamp"),
])
def test_malformed_payloads_say_what_is_wrong(payload, words):
    with pytest.raises(WireError, match=words):
        decode_payload(payload)


def test_oversized_and_bad_sequence_frames():
    with pytest.raises(WireError, match="oversized"):
        decode_payload(b"\x00" * (MAX_PAYLOAD_BYTES + 1))
    with pytest.raises(WireError, match="8"):
        decode_seq(b"\x00\x01")
    assert decode_seq((41).to_bytes(8, "big")) == 41
