"""engine/core/tiers.py without a model: which blocks move where, the copies recorded for the worker, the events,
and the hierarchy's promise (device + host behave as one LRU of the summed capacity)."""

from __future__ import annotations

import random

import pytest

from engine.core.blocks import BlockCopy
from engine.core.request import Request, SamplingParams, Status
from engine.trace import TraceSink
from tests.helpers.model_free import model_free_manager

BS = 4


def request(rid: str, tokens, salt: str | None = None) -> Request:
    return Request(rid, list(tokens), SamplingParams(max_tokens=1), 0.0, salt)


def serve(manager, rid: str, tokens, salt: str | None = None) -> Request:
    """Admit, compute the rest of the prompt, cache its whole blocks, finish: one request, start to end."""
    req = request(rid, tokens, salt)
    manager.admit(req)
    req.status = Status.RUNNING
    manager.allocate_slots(req, req.num_tokens - req.num_computed)
    req.num_computed = req.num_tokens
    manager.cache_blocks(req)
    manager.free(req)
    return req


def tiered(num_blocks: int, host: int, disk: int = 0):
    events: list[dict] = []
    trace = TraceSink(clock=lambda: 0.0)
    trace.listeners.append(events.append)
    manager = model_free_manager(
        num_blocks, BS, trace, partial_hits=False, host_blocks=host, disk_blocks=disk
    )
    return manager, events


def of_type(events, kind: str) -> list[dict]:
    return [e for e in events if e["type"] == kind]


def test_an_evicted_block_is_copied_to_host_and_a_later_match_loads_it_back():
    manager, events = tiered(4, host=4)
    serve(manager, "a", range(13))
    # three whole blocks cached; b needs all four device blocks, so a's blocks leave the device, last first
    serve(manager, "b", range(100, 116))
    offloaded = of_type(events, "block_offloaded")
    assert [(e["src"], e["slot"], e["logical"]) for e in offloaded] == [(2, 0, 2), (1, 1, 1), (0, 2, 0)]
    assert [e["token_ids"] for e in offloaded][0] == [8, 9, 10, 11]
    assert offloaded[0]["parent_hash"] == offloaded[1]["hash"]
    moves = manager.pool.take_copies()
    assert moves == [
        BlockCopy(2, 0, BS, "device", "host"),
        BlockCopy(1, 1, BS, "device", "host"),
        BlockCopy(0, 2, BS, "device", "host"),
    ]
    events.clear()
    c = serve(manager, "c", range(13))
    # the whole prefix came back from host: 12 tokens served, none recomputed but the last
    assert c.num_cached == 12
    match = of_type(events, "prefix_match")[0]
    assert match["tiers"] == ["host", "host", "host"] and match["matched_tokens"] == 12
    loaded = of_type(events, "block_loaded")
    assert [(e["slot"], e["logical"]) for e in loaded] == [(2, 0), (1, 1), (0, 2)]
    assert all(e["bytes"] == manager.tiers.bytes_per_block for e in loaded)
    # loads are recorded after the offloads that made room for them, each from the slot the block was in
    loads = [m for m in manager.pool.take_copies() if m.src_tier == "host"]
    assert [(m.src, m.dst_tier) for m in loads] == [(2, "device"), (1, "device"), (0, "device")]
    assert manager.hit_rates.tier_hits == {"device": 0, "host": 12}
    # exclusive: the loaded blocks left host
    assert set(manager.tiers.slots()["host"].values()) == {
        e["hash"] for e in of_type(events, "block_offloaded")
    }


def test_a_match_runs_from_device_blocks_into_host_blocks():
    manager, events = tiered(6, host=8)
    serve(manager, "a", range(17))
    # a request sharing a's first two blocks keeps them on the device; a's last two go to host
    serve(manager, "b", [*range(8), *range(200, 213)])
    events.clear()
    serve(manager, "c", range(17))
    match = of_type(events, "prefix_match")[0]
    assert match["tiers"] == ["device", "device", "host", "host"]
    assert match["matched_tokens"] == 16 and match["reason"] == "full_match"


def test_a_full_host_drops_its_oldest_block_and_the_explainer_says_so():
    manager, events = tiered(4, host=2)
    serve(manager, "a", range(13))
    serve(manager, "b", range(100, 116))
    dropped = of_type(events, "host_evicted")
    # a's last block arrived first and is dropped first: its parents stay reachable
    assert [(e["slot"], e["reason"], e["tier"]) for e in dropped] == [(0, "capacity", "host")]
    assert dropped[0]["hash"] == of_type(events, "block_offloaded")[0]["hash"]
    events.clear()
    c = serve(manager, "c", range(13))
    assert c.num_cached == 8
    match = of_type(events, "prefix_match")[0]
    assert match["tiers"] == ["host", "host"] and match["reason"] == "evicted"
    assert match["detail"]["policy"] == "lru (host)" and match["detail"]["position"] == 8


def test_host_demotes_to_disk_and_a_match_loads_from_disk():
    manager, events = tiered(4, host=1, disk=4)
    serve(manager, "a", range(13))
    serve(manager, "b", range(100, 116))
    offloaded = of_type(events, "block_offloaded")
    assert [(e["src_tier"], e["tier"]) for e in offloaded] == [
        ("device", "host"),
        ("host", "disk"),
        ("device", "host"),
        ("host", "disk"),
        ("device", "host"),
    ]
    assert not of_type(events, "host_evicted")
    events.clear()
    serve(manager, "c", range(13))
    assert of_type(events, "prefix_match")[0]["tiers"] == ["host", "disk", "disk"]
    assert manager.hit_rates.tier_hits == {"device": 0, "host": 4, "disk": 8}


def test_a_block_computed_again_on_the_device_leaves_host():
    manager, events = tiered(8, host=4)
    a = request("a", range(13))
    manager.admit(a)
    a.status = Status.RUNNING
    manager.allocate_slots(a, 13)
    a.num_computed = 13
    # b's prefix is cached and evicted to host while a, admitted before, still computes the same tokens
    serve(manager, "b", range(9))
    manager.evict(2)
    assert len(manager.tiers.slots()["host"]) == 2
    manager.cache_blocks(a)
    assert [e["reason"] for e in of_type(events, "host_evicted")] == ["on_device", "on_device"]
    assert manager.tiers.slots()["host"] == {}


def test_loads_stop_where_the_device_has_no_room():
    manager, events = tiered(5, host=8)
    serve(manager, "a", range(17))
    serve(manager, "b", range(100, 117))
    # a running request holds two of the five device blocks
    x = request("x", range(300, 308))
    manager.admit(x)
    manager.allocate_slots(x, 8)
    events.clear()
    # a's four whole blocks are on host; three device blocks are left and one stays for the first chunk
    c = request("c", range(17))
    manager.admit(c)
    match = of_type(events, "prefix_match")[0]
    assert match["tiers"] == ["host", "host"] and c.num_cached == 8
    assert match["detail"]["not_loaded"] == 2
    assert manager.can_allocate(1) and not manager.can_allocate(2)


def test_bad_tier_sizes_are_refused():
    from engine.config import EngineConfig

    with pytest.raises(ValueError, match="disk_blocks needs host_blocks"):
        EngineConfig(disk_blocks=4)
    with pytest.raises(ValueError, match=">= 0"):
        EngineConfig(host_blocks=-1)
    with pytest.raises(ValueError, match="prefix cache"):
        EngineConfig(host_blocks=4, prefix_cache=False)


@pytest.mark.parametrize("seed", range(40))
def test_device_and_host_hit_as_one_lru_of_their_summed_blocks(seed):
    """An exclusive LRU hierarchy: with whole blocks, LRU and one request at a time, every request's hit equals
    the hit of a single pool as large as device and host together (the one-pass split's premise)."""
    rng = random.Random(seed)
    heads = [[rng.randrange(1000, 2000) for _ in range(rng.randrange(4, 13))] for _ in range(4)]
    device, host = rng.randrange(8, 14), rng.randrange(2, 12)
    split, _ = tiered(device, host=host)
    one, _ = tiered(device + host, host=0)
    for i in range(40):
        tokens = [*rng.choice(heads), *(rng.randrange(3, 999) for _ in range(rng.randrange(1, 10)))]
        a = serve(split, f"r{i}", tokens)
        b = serve(one, f"r{i}", tokens)
        assert a.num_cached == b.num_cached, f"request {i}: {a.num_cached} vs {b.num_cached}"
