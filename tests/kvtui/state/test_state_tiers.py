"""The lower tiers reducer (kvtui/state/tiers.py): slots filled by offloads, freed by loads and host evictions,
blocks moved down to disk, bytes moved and hits by tier; and a real engine with a host tier, live and replayed."""

from __future__ import annotations

from collections import Counter

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.trace import read_trace
from kvtui.state import replay, state_fingerprint
from kvtui.state.timeline import Timeline
from tests.helpers.oracle import Witness, differences
from tests.helpers.tiny_models import tiny_model
from tests.kvtui.state.reducer_events import HEADER, Events, arrive

TIERED = {**HEADER, "config": {"host_blocks": 2, "disk_blocks": 1}}


def offload(e: Events, key: str, parent: str, slot: int, tier="host", src_tier="device", src=0, logical=1):
    e(
        "block_offloaded",
        hash=key,
        parent_hash=parent,
        src_tier=src_tier,
        src=src,
        tier=tier,
        slot=slot,
        logical=logical,
        token_ids=[5, 6, 7, 8],
        texts=["a", "b", "c", "d"],
    )


def test_no_tiers_in_the_header_no_tier_state():
    s = replay(HEADER, [])
    assert (s.lower_tiers, s.tier_hashes(), s.tier_hits) == ([], {}, {})


def test_offload_demote_load_and_drop():
    e = Events()
    offload(e, "k1", "k0", 0)
    offload(e, "k2", "k1", 1, logical=2)
    s = replay(TIERED, e.out)
    assert s.lower_tiers == ["host", "disk"] and s.tier_capacity == {"host": 2, "disk": 1}
    assert s.tier_hashes() == {"host": {0: "k1", 1: "k2"}, "disk": {}}
    assert s.tier_slots["host"][1].token_ids == (5, 6, 7, 8) and s.tier_slots["host"][1].texts[0] == "a"
    assert s.tier_children() == {"k0": [("host", 0)], "k1": [("host", 1)]}
    assert s.tier_moves["host"].offloaded == 2 and s.tier_moves["host"].offloaded_bytes == 2 * 64
    # host full: its oldest moves down to disk, then the new block takes the slot
    offload(e, "k1", "k0", 0, tier="disk", src_tier="host", src=0)
    offload(e, "k3", "k0", 0, src=4)
    s = replay(TIERED, e.out)
    assert s.tier_hashes() == {"host": {0: "k3", 1: "k2"}, "disk": {0: "k1"}}
    assert s.tier_of["k1"] == ("disk", 0) and s.tier_moves["host"].demoted == 1
    # a request's match loads two blocks back; its prefix_match takes them
    arrive(e, "r", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    e("block_loaded", hash="k1", tier="disk", slot=0, physical=2, request_id="r", logical=1, bytes=64)
    e("block_loaded", hash="k2", tier="host", slot=1, physical=3, request_id="r", logical=2, bytes=64)
    e("prefix_match", request_id="r", prompt_tokens=9, matched_tokens=8, reason="full_match", detail={})
    e(
        "hit_rates",
        token_hit_rate=1.0,
        request_hit_rate=1.0,
        block_hit_rate=1.0,
        window={},
        tiers={"device": {"hit_tokens": 0}, "host": {"hit_tokens": 4}, "disk": {"hit_tokens": 4}},
    )
    s = replay(TIERED, e.out)
    assert s.tier_hashes() == {"host": {0: "k3"}, "disk": {}}
    assert "k1" not in s.tier_of and "k2" not in s.tier_of
    assert s.requests["r"].loaded == {"disk": [1, 64], "host": [1, 64]}
    assert s.tier_hits == {"device": 0, "host": 4, "disk": 4}
    assert (s.tier_moves["host"].loaded, s.tier_moves["disk"].loaded_bytes) == (1, 64)
    e("host_evicted", hash="k3", tier="host", slot=0, reason="on_device")
    s = replay(TIERED, e.out)
    assert s.tier_hashes() == {"host": {}, "disk": {}} and s.tier_of == {}
    assert s.tier_moves["host"].dropped_on_device == 1 and s.tier_moves["host"].dropped_capacity == 0


def test_snapshots_do_not_share_tier_state():
    e = Events()
    offload(e, "k1", "k0", 0)
    s = replay(TIERED, e.out)
    copy = s.snapshot()
    e2 = Events()
    e2.out = list(e.out)
    e2("host_evicted", hash="k1", tier="host", slot=0, reason="capacity")
    s.apply(e2.out[-1])
    assert s.tier_hashes()["host"] == {} and copy.tier_hashes()["host"] == {0: "k1"}
    assert s.tier_moves["host"].dropped_capacity == 1 and copy.tier_moves["host"].dropped_capacity == 0


def test_a_host_tier_live_equals_replay_and_the_engine(tmp_path):
    """Offloads, loads and a host eviction on a real engine: the view built live (through JSON) and the replay
    of the trace file agree with each other and with the engine after every request."""
    engine = Engine.from_model(
        tiny_model("llama-gqa"),
        config=EngineConfig(block_size=2, num_blocks=10, max_batched_tokens=32, host_blocks=3),
    )
    path = tmp_path / "trace.jsonl"
    engine.add_trace_file(path)
    witness = Witness(engine)
    seen: Counter = Counter()
    engine.trace.listeners.append(lambda event: seen.update([event["type"]]))

    def run(prompt):
        engine.submit(prompt, SamplingParams(max_tokens=1))
        while engine.has_unfinished():
            engine.step()
        assert differences(engine, witness.state()) == []

    first = list(range(20, 30))
    run(first)
    # three cached leaves to host, then the next turn loads them back
    engine.cache.evict(3)
    run(first + [7, 8, 9])
    # more than host holds: its oldest is dropped
    engine.cache.evict(5)
    run(first + [7, 8, 9, 10])
    engine.close()
    assert seen["block_offloaded"] >= 7 and seen["block_loaded"] >= 6 and seen["host_evicted"] >= 1
    live = witness.state()
    trace = read_trace(path, strict=True)
    replayed = replay(trace.header, trace.events)
    live_print, replay_print = state_fingerprint(live), state_fingerprint(replayed)
    assert [k for k in live_print if live_print[k] != replay_print[k]] == []
    assert differences(engine, replayed) == []
    loads = [r.loaded for r in replayed.requests.values()]
    assert loads[0] is None and loads[1] == {"host": [3, 3 * trace.header["bytes_per_block"]]}
    assert replayed.tier_hits == engine.cache.hit_rates.tier_hits and replayed.tier_hits["host"] == 12


def test_seeking_the_host_tier_fixture_equals_a_straight_replay():
    """Keyframes copy the tier state: a state rebuilt from one never sees a later event (seek back and forth)."""
    trace = read_trace("fixtures/traces/host_tier.jsonl", strict=True)
    timeline = Timeline(trace.header, trace.events, keyframe_every=5)
    for k in [len(trace.events), 3, 200, 377, 150, 0, 321]:
        seen = state_fingerprint(timeline.state_at(k))
        straight = state_fingerprint(replay(trace.header, trace.events[:k]))
        assert [key for key in seen if seen[key] != straight[key]] == [], k
    assert replay(trace.header, trace.events).tier_moves["host"].loaded == 6
