"""The attacher against publishers on loopback: late join, gaps, restarts, garbage, three engines at once."""

from __future__ import annotations

import pytest

from engine.trace import TraceSink
from kvtui.sources.attach import Attacher
from kvtui.sources.endpoints import parse_source
from kvtui.state.fleet import FleetState
from kvtui.state.fleet_stats import workers_summary
from tests.kvtui.sources.attach_publishers import (
    OldBlockStored,
    Publisher,
    SBatch,
    SBlockRemoved,
    SBlockStored,
    VBatch,
    VBlockRemoved,
    VBlockStored,
    wait_for,
)

LOOP = "tcp://127.0.0.1:*"


def stored(h, parent, tokens, size=2):
    return VBlockStored([h], parent, tokens, size, None, "GPU", None)


class Harness:
    def __init__(self, publishers, replay=True, **source_options):
        self.sink = TraceSink()
        # as the trace would hold them
        self.events = []
        self.sink.listeners.append(lambda e: self.events.append(e if isinstance(e, dict) else e.as_dict()))
        self.fleet = FleetState({})
        self.sink.listeners.append(self.fleet.apply)
        self.sources = []
        for i, pub in enumerate(publishers):
            text = pub.endpoint + (f",replay={pub.replay}" if replay and pub.replay else "") + f",name=p{i}"
            self.sources.append(parse_source(text))
        # replays answer in milliseconds; the timeout only bounds a failure, so a loaded machine gets room
        self.attacher = Attacher(self.sources, self.sink, replay_timeout=20.0)
        self.publishers = publishers

    def start(self):
        self.attacher.start()
        assert self.attacher.ready.wait(20 * len(self.sources) + 10)
        for pub in self.publishers:
            pub.wait_subscribed()

    def types(self, etype):
        return [e for e in self.events if e["type"] == etype]

    def close(self):
        self.attacher.stop()
        for pub in self.publishers:
            pub.close()


@pytest.fixture
def harness():
    made = []

    def make(publishers, **kw):
        h = Harness(publishers, **kw)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def test_late_join_is_recovered_by_replay(harness):
    pub = Publisher(LOOP, replay=LOOP)
    # published before anyone listens: only the replay buffer has them
    for i in range(5):
        pub.publish(VBatch(float(i), [stored(100 + i, 100 + i - 1 if i else None, [i, i])], 0), send=False)
    h = harness([pub])
    h.start()
    assert wait_for(lambda: h.fleet.workers and h.fleet.workers["p0"].stored == 5)
    pub.publish(VBatch(5.0, [stored(105, 104, [5, 5])], 0))
    assert wait_for(lambda: h.fleet.workers["p0"].stored == 6)
    assert h.fleet.workers["p0"].resident == 6
    # nothing lost: the replay started at batch 0
    assert h.types("attach_gap") == []
    assert [e["wire_seq"] for e in h.types("kv_block_stored")] == list(range(6))


def test_a_gap_is_filled_from_the_replay_endpoint_and_counted_without_one(harness):
    with_replay, without = Publisher(LOOP, replay=LOOP), Publisher(LOOP)
    h = harness([with_replay, without])
    h.start()
    for pub in (with_replay, without):
        pub.publish(VBatch(0.0, [stored(1, None, [1, 1])], 0))
        # lost on the wire
        pub.publish(VBatch(1.0, [stored(2, 1, [2, 2])], 0), send=False)
        pub.publish(VBatch(2.0, [stored(3, 2, [3, 3])], 0))
    assert wait_for(
        lambda: (
            len(h.fleet.workers) == 2
            and all(w.stored >= 2 for w in h.fleet.workers.values())
            and len(h.types("attach_gap")) == 2
        )
    )
    gaps = {e["source"]: e for e in h.types("attach_gap")}
    assert gaps[with_replay.endpoint] | {} == {
        **gaps[with_replay.endpoint],
        "kind": "gap",
        "expected": 1,
        "got": 2,
        "recovered": 1,
        "lost": 0,
    }
    assert gaps[without.endpoint]["lost"] == 1 and gaps[without.endpoint]["recovered"] == 0
    assert h.fleet.workers["p0"].resident == 3 and h.fleet.workers["p1"].resident == 2
    summary = {w["name"]: w for w in workers_summary(h.fleet)}
    assert summary["p0"]["gaps"] == 1 and summary["p1"]["lost_batches"] == 1


def test_a_restart_clears_the_workers_cache(harness):
    pub = Publisher(LOOP, replay=LOOP)
    h = harness([pub])
    h.start()
    for i in range(3):
        pub.publish(VBatch(float(i), [stored(10 + i, 10 + i - 1 if i else None, [i, i])], 0))
    assert wait_for(lambda: h.fleet.workers.get("p0") and h.fleet.workers["p0"].resident == 3)
    # a new server process: numbering from 0 again, empty cache
    pub.restart()
    pub.publish(VBatch(9.0, [stored(50, None, [7, 7])], 0))
    assert wait_for(lambda: h.fleet.sources[pub.endpoint].restarts == 1 and h.fleet.workers["p0"].stored == 4)
    assert h.fleet.workers["p0"].resident == 1
    assert [e["cause"] for e in h.types("kv_all_cleared")] == ["restart"]


def test_a_restart_right_after_the_replay_is_a_restart_not_duplicates(harness):
    """Joined by replay, no live message yet: a new process's seq 0 is known by its newer batch, not dropped."""
    pub = Publisher(LOOP, replay=LOOP)
    for i in range(3):
        pub.publish(VBatch(float(i), [stored(10 + i, 10 + i - 1 if i else None, [i, i])], 0), send=False)
    h = harness([pub])
    h.start()
    assert wait_for(lambda: h.fleet.workers.get("p0") and h.fleet.workers["p0"].resident == 3)
    pub.restart()
    pub.publish(VBatch(100.0, [stored(50, None, [7, 7])], 0))
    assert wait_for(lambda: h.fleet.sources[pub.endpoint].restarts == 1 and h.fleet.workers["p0"].stored == 4)
    assert h.fleet.workers["p0"].resident == 1


def test_garbage_frames_are_counted_never_fatal(harness):
    pub = Publisher(LOOP)
    h = harness([pub])
    h.start()
    # one frame
    pub.send_raw([b""])
    # a 2-byte sequence number
    pub.send_raw([b"", b"\x00\x01", b"\x90"])
    pub.send_raw([b"", (0).to_bytes(8, "big"), b"\xc1\xc1 not msgpack"])
    # event 7
    pub.send_raw([b"", (0).to_bytes(8, "big"), b"\x93\xcb" + b"\x00" * 8 + b"\x91\x07\x00"])
    pub.publish(VBatch(0.0, [stored(1, None, [1, 1])], 0))
    assert wait_for(lambda: h.fleet.workers.get("p0") and h.fleet.workers["p0"].stored == 1)
    reasons = [e["reason"] for e in h.types("attach_malformed")]
    assert len(reasons) == 4 and h.fleet.sources[pub.endpoint].malformed == 4
    assert "frames" in reasons[0] and "8" in reasons[1] and "msgpack" in reasons[2] and "tagged" in reasons[3]
    pub.send_raw([b"", (1).to_bytes(8, "big"), b"\x92\xcb" + b"\x00" * 8 + b"\x91" * 100_000 + b"\xc0"])
    pub.publish(VBatch(1.0, [stored(2, 1, [2, 2])], 0))
    # the receive loop outlived a decoder recursion
    assert wait_for(lambda: h.fleet.workers["p0"].stored == 2)
    assert "nested too deeply" in h.types("attach_malformed")[-1]["reason"]


def test_three_publishers_at_once_vllm_new_vllm_old_and_sglang(harness):
    new = Publisher(LOOP, replay=LOOP, topic="kv-events")
    old = Publisher(LOOP, replay=LOOP, old_replay=True)
    sgl = Publisher(LOOP, replay=LOOP)
    old.publish(
        VBatch(0.0, [OldBlockStored([(1 << 64) - 1, 5], None, [1, 2, 3, 4], 2, None, "GPU", None)], 0),
        # only in its replay buffer: the old replay frames must decode
        send=False,
    )
    h = harness([new, old, sgl])
    h.start()
    new.publish(VBatch(0.0, [VBlockStored([(1 << 64) - 1, 5], None, [1, 2, 3, 4], 2, None, "GPU", None)], 0))
    new.publish(VBatch(1.0, [VBlockRemoved([5], "GPU")], 0))
    sgl.publish(
        SBatch(
            0.0,
            [
                SBlockStored([-1], None, [[1, 2], [2, 3]], 2, None, "GPU"),
                SBlockStored([77], -1, [[3, 4], [4, 5]], 2, None, "GPU"),
            ],
            0,
        )
    )
    sgl.publish(SBatch(1.0, [SBlockRemoved([77])], 0))
    assert wait_for(
        lambda: (
            len(h.fleet.workers) == 3
            and sum(w.removed for w in h.fleet.workers.values()) == 2
            and h.fleet.workers["p1"].stored == 2
        )
    )
    resident = {w: h.fleet.workers[w].resident for w in ("p0", "p1", "p2")}
    assert resident == {"p0": 1, "p1": 2, "p2": 1}
    # the same hash (u64 from vLLM, -1 as int64 from SGLang) for the same first block: one node, three holders
    assert h.fleet.holders_of((0, "ffffffffffffffff")) == ["p0", "p1", "p2"]
    assert h.attacher.counters.malformed == 0


class FakeTokenizer:
    def decode(self, ids):
        return "".join(chr(ord("a") + i % 26) for i in ids)


def test_a_tokenizer_puts_text_on_the_blocks_and_the_tree(harness):
    from kvtui.state.fleet_view import tree_rows

    pub = Publisher(LOOP, replay=LOOP)
    h = harness([pub])
    h.attacher.tokenizer = FakeTokenizer()
    h.start()
    pub.publish(VBatch(0.0, [stored(1, None, [0, 1]), stored(2, 1, [2, 3])], 0))
    assert wait_for(lambda: h.fleet.workers.get("p0") and h.fleet.workers["p0"].stored == 2)
    assert h.types("kv_block_stored")[0]["texts"] == ["a", "b"]
    (row,) = tree_rows(h.fleet)
    assert (row.holders, row.blocks, row.text) == (("p0",), 2, "abcd")
