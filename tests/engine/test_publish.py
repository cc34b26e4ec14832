"""engine -> publish (vLLM's wire) -> attach: the attached fleet holds exactly the engine's own prefix tree."""

from __future__ import annotations

import time

import pytest

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.publish import KvEventPublisher, parse_publish
from engine.trace import TraceSink
from tests.helpers.tiny_models import random_prompts, tiny_model

pytest.importorskip("zmq")

from kvtui.sources.attach import Attacher  # noqa: E402
from kvtui.sources.endpoints import parse_source  # noqa: E402
from kvtui.state.fleet import FleetState  # noqa: E402

BS = 4


def engine_paths(engine) -> set[tuple]:
    """Every cached block of the engine's radix tree as the token ids from the root through it."""
    out = set()

    def walk(node, prefix):
        for child in node.children.values():
            tokens = list(prefix)
            for i in range(len(child.blocks)):
                tokens += child.token_ids[i * BS : (i + 1) * BS]
                out.add(tuple(tokens))
            walk(child, tokens)

    walk(engine.cache.prefix_cache.radix.root, [])
    return out


def fleet_paths(fleet: FleetState) -> set[tuple]:
    out = set()
    for node in fleet.nodes.values():
        if not node.holders:
            continue
        tokens, cur = [], node
        while cur is not None:
            tokens[:0] = cur.token_ids
            cur = fleet.nodes.get((cur.group, cur.parent)) if cur.parent else None
        out.add(tuple(tokens))
    return out


def test_engine_publish_attach_gives_the_engines_tree():
    engine = Engine.from_model(tiny_model(), config=EngineConfig(block_size=BS, num_blocks=24))
    publisher = KvEventPublisher("tcp://127.0.0.1:*", replay="tcp://127.0.0.1:*", topic="kv-events")
    engine.trace.listeners.append(publisher)
    sink = TraceSink()
    fleet = FleetState({})
    sink.listeners.append(fleet.apply)
    attacher = Attacher(
        [parse_source(f"{publisher.endpoint},replay={publisher.replay},topic=kv-events")], sink
    )
    attacher.start()
    assert attacher.ready.wait(20)
    shared = random_prompts([12])[0]
    # more prompts than a pool of 24 blocks keeps: evictions travel too; a message the subscriber missed
    # while it was joining is fetched from the replay endpoint
    for prompt in random_prompts([6, 9, 5, 11, 7, 13, 10, 10], seed=3):
        engine.generate([shared + prompt], SamplingParams(max_tokens=6))
    publisher.flush()
    deadline = time.monotonic() + 20
    while (
        time.monotonic() < deadline
        and sum(s.tracker.applied for s in attacher._streams.values()) < publisher.published - 1
    ):
        time.sleep(0.05)
    attacher.stop()
    publisher.close()
    assert publisher.published > 0 and attacher.counters.malformed == 0 and attacher.counters.lost == 0
    assert sum(w.removed for w in fleet.workers.values()) > 0, "the workload should have evicted something"
    assert fleet_paths(fleet) == engine_paths(engine)
    (worker,) = fleet.workers.values()
    assert worker.resident == sum(len(n.blocks) for n in engine.cache.prefix_cache.radix.nodes.values())


def test_parse_publish():
    assert parse_publish("tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558,topic=kv") == {
        "endpoint": "tcp://127.0.0.1:5557",
        "replay": "tcp://127.0.0.1:5558",
        "topic": "kv",
    }
    with pytest.raises(ValueError, match="tcp://HOST:PORT"):
        parse_publish("127.0.0.1:5557")
    with pytest.raises(ValueError, match="rank= must be a number"):
        parse_publish("tcp://127.0.0.1:5557,rank=x")
