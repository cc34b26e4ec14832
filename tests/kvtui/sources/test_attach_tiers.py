"""Tiers on the wire: vLLM's offloading stores (with and without token ids, secondary tiers) and SGLang HiCache's
write-back, encoded by structs declared as the released engines declare them, decoded, attached on loopback and
folded into residency per (worker, tier)."""

from __future__ import annotations

import msgspec
import pytest

from kvtui.sources.wire import WireError, decode_payload, normalise_event
from kvtui.state.fleet import FleetState, replay_fleet
from tests.kvtui.sources.attach_publishers import (
    Publisher,
    SBatch,
    SBlockRemoved,
    SBlockStored,
    SStorageMedium,
    VBatch,
    VBlockRemoved,
    VBlockStored,
    v_placeholder,
    wait_for,
)
from tests.kvtui.sources.test_attach_loopback import LOOP, Harness

enc = msgspec.msgpack.encode
BIG = (1 << 64) - 9


def gpu_store(hashes, parent=None, size=2):
    return VBlockStored(
        hashes, parent, [h % 50 for h in hashes for _ in range(size)], size, None, "GPU", None
    )


def fold(*payloads) -> FleetState:
    fleet = FleetState({})
    for seq, payload in enumerate(payloads):
        batch = decode_payload(enc(payload))
        for e in batch.events:
            e.worker, e.seq, e.t = "w", seq, float(seq)
        fleet.apply_all(batch.events)
    return fleet


def test_vllm_offloading_placeholder_decodes_beside_the_gpu_events():
    batch = decode_payload(
        enc(
            VBatch(
                1.0,
                [
                    gpu_store([7, BIG]),
                    v_placeholder(BIG, "CPU", locality="LOCAL"),
                    VBlockRemoved([BIG], "GPU"),
                ],
            )
        )
    )
    stored, placeholder, removed = batch.events
    assert (placeholder.hashes, placeholder.token_ids, placeholder.block_size) == ([BIG], [], 0)
    assert (placeholder.medium, placeholder.locality, placeholder.parent) == ("CPU", "LOCAL", None)
    assert placeholder.as_dict()["locality"] == "LOCAL" and "ownership" not in placeholder.as_dict()
    # the general path (any event the fast one hands over) takes it too
    raw = msgspec.msgpack.decode(enc(v_placeholder(BIG, "STORAGE", ownership="kvcr")))
    assert normalise_event(raw).ownership == "kvcr"


def test_a_store_without_token_ids_keeps_its_block_size_and_tokens_still_must_fill_blocks():
    # vLLM's simple CPU offload when the request is gone: no tokens, the block size given
    simple = VBlockStored([5], None, [], 16, None, "CPU", None, locality="LOCAL")
    assert decode_payload(enc(VBatch(0.0, [simple]))).events[0].block_size == 16
    with pytest.raises(WireError, match="block_size is not a positive integer"):
        normalise_event(msgspec.msgpack.decode(enc(VBlockStored([5], None, [1, 2], 0, None, "GPU", None))))
    with pytest.raises(WireError, match="3 token ids for 1 blocks of 2"):
        decode_payload(enc(VBatch(0.0, [VBlockStored([5], None, [1, 2, 3], 2, None, "CPU", None)])))


def test_vllm_offload_to_cpu_and_back():
    fleet = fold(
        VBatch(1.0, [gpu_store([1, 2])]),
        VBatch(2.0, [v_placeholder(2, "CPU", locality="LOCAL")]),
        VBatch(3.0, [VBlockRemoved([2], "GPU")]),
        VBatch(4.0, [VBlockRemoved([2], "CPU")]),
    )
    w = fleet.workers["w"]
    assert w.held_tiers() == {"GPU": 1, "CPU": 0} and w.removed_tiers() == {"GPU": 1, "CPU": 1}
    # the CPU copy went last: the explainer names it
    assert fleet.nodes[(0, 2)].removed == {"w": (3.0, "CPU")}


def test_secondary_tier_is_held_apart_from_the_primary_on_the_same_medium():
    fleet = fold(
        VBatch(1.0, [gpu_store([1])]),
        VBatch(2.0, [v_placeholder(1, "CPU"), v_placeholder(1, "CPU", ownership="kvcr")]),
        VBatch(3.0, [VBlockRemoved([1], "CPU", ownership="kvcr")]),
    )
    assert fleet.workers["w"].held_tiers() == {"GPU": 1, "CPU": 1, "CPU/kvcr": 0}
    assert fleet.nodes[(0, 1)].holders["w"] == {"GPU", "CPU"}


def test_sglang_hicache_write_back_and_eviction_from_host():
    store = SBlockStored([-3], None, [4, 5], 2, None, medium=SStorageMedium.GPU)
    host = SBlockStored([-3], None, [4, 5], 2, None, medium=SStorageMedium.CPU)
    fleet = fold(
        SBatch(1.0, [store], 0),
        # evicted from the GPU, backed up to host memory
        SBatch(2.0, [SBlockRemoved([-3], medium=SStorageMedium.GPU), host], 0),
    )
    node = fleet.nodes[(0, (1 << 64) - 3)]
    assert node.holders["w"] == {"CPU_PINNED"} and fleet.workers["w"].held_tiers() == {
        "GPU": 0,
        "CPU_PINNED": 1,
    }
    fleet.apply_all([_removed(-3, "CPU_PINNED")])
    assert not node.holders and node.removed["w"][1] == "CPU_PINNED"


def _removed(h, medium):
    (e,) = decode_payload(enc(SBatch(3.0, [SBlockRemoved([h], medium=medium)], 0))).events
    e.worker, e.seq, e.t = "w", 9, 3.0
    return e


def test_attached_vllm_with_cpu_offloading_and_its_trace_replayed(harness):
    pub = Publisher(LOOP)
    h = harness([pub], replay=False)
    h.start()
    pub.publish(VBatch(1.0, [gpu_store([1, 2]), v_placeholder(2, "CPU", locality="LOCAL")], 0))
    pub.publish(VBatch(2.0, [VBlockRemoved([1, 2], "GPU"), v_placeholder(9, "CPU")], 0))
    assert wait_for(lambda: h.fleet.index >= 5)
    (worker,) = h.fleet.workers.values()
    assert worker.held_tiers() == {"GPU": 0, "CPU": 2}
    assert not h.types("attach_malformed")
    # the hash stored on CPU alone, with no tokens, is held apart from the tree of token chains
    assert (0, 9) in h.fleet.orphans
    again = replay_fleet({}, h.events)
    assert again.workers[worker.worker].held_tiers() == worker.held_tiers()


@pytest.fixture
def harness():
    made = []

    def make(publishers, **kw):
        made.append(Harness(publishers, **kw))
        return made[-1]

    yield make
    for h in made:
        h.close()
