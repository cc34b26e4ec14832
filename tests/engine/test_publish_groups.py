"""engine/publish.py under window_layout="paged": every block event names its vLLM KV-cache group, the window
groups' blocks are published beside the tree's, and the stream decoded by kvtui's own wire decoder, replayed
per (group, hash), gives exactly the blocks the engine holds cached in each group."""

from __future__ import annotations

import pytest
import torch
import transformers

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.publish import KvEventPublisher
from engine.trace.attach_structs import KvBlockRemoved, KvBlockStored
from tests.helpers.tiny_models import random_prompts
from tests.helpers.tiny_trace import HYBRID

pytest.importorskip("zmq")

from kvtui.sources.wire import decode_payload  # noqa: E402

BS = 4
# a window of 8 and a full layer: groups [sliding, sliding, full], the tree holds group 2
HYBRID_LAYERS = ["sliding_attention", "full_attention", "sliding_attention"]
# no full layer: one window group and the tree's layerless "index" group, which vLLM does not have
WINDOW_LAYERS = ["sliding_attention", "sliding_attention"]


def window_model(layer_types: list[str]):
    """A tiny random Gemma 3 with these layers (sliding ones attend through a window of 8)."""
    torch.manual_seed(0)
    config = transformers.Gemma3TextConfig(
        **{**HYBRID, "num_hidden_layers": len(layer_types), "layer_types": layer_types}
    )
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    return model


def paged_engine(layer_types: list[str], retention: int | None) -> Engine:
    return Engine.from_model(
        window_model(layer_types),
        config=EngineConfig(
            device="cpu",
            block_size=BS,
            num_blocks=40,
            max_batched_tokens=24,
            window_layout="paged",
            retention_interval=retention,
        ),
    )


def engine_cached(engine: Engine) -> set[tuple[int, int]]:
    """(vLLM group, u64 hash) of every block the engine holds cached: the tree's in the table group (unless it
    is the layerless index group), each window group's hash map."""
    groups = engine.cache.groups
    out = {(g, int(key, 16)) for g in groups.others for key in groups.by_hash[g]}
    if groups.groups[groups.table_group].kind != "index":
        for node in engine.cache.prefix_cache.radix.nodes.values():
            out |= {(groups.table_group, int(key, 16)) for key in node.keys}
    return out


@pytest.mark.parametrize(
    "layer_types, retention",
    [(HYBRID_LAYERS, 0), (HYBRID_LAYERS, None), (WINDOW_LAYERS, 0)],
    ids=["hybrid", "hybrid-every-block", "windows-only"],
)
def test_paged_publish_names_groups_and_replays_to_the_engines_cache(layer_types, retention):
    engine = paged_engine(layer_types, retention)
    publisher = KvEventPublisher("tcp://127.0.0.1:*")
    publisher(engine.trace.header)
    engine.trace.listeners.append(publisher)
    shared = random_prompts([14], vocab=97)[0]
    # a shared prefix, turns that fork from it, and a pool of 40 blocks that the later ones overflow
    prompts = [shared + p for p in random_prompts([5, 9, 3, 11, 7, 13, 6, 10], vocab=97, seed=3)]
    for batch in (prompts[:3], prompts[3:6], prompts[6:]):
        engine.generate(batch, SamplingParams(max_tokens=6, ignore_eos=True))
    publisher.close()
    kv_groups = engine.trace.header["kv_groups"]

    held: set[tuple[int, int]] = set()
    stored_groups, removed = set(), 0
    for seq, payload in publisher.buffer:
        for e in decode_payload(payload).events:
            assert e.group is not None, f"batch {seq}: {type(e).__name__} without group_idx"
            assert kv_groups[e.group]["kind"] != "index", f"batch {seq}: the index group is published"
            if type(e) is KvBlockStored:
                kind, window = kv_groups[e.group]["kind"], kv_groups[e.group]["window"]
                assert (e.spec_kind, e.sliding_window) == (kind, window if kind == "sliding_window" else None)
                assert len(e.token_ids) == e.block_size * len(e.hashes) == BS * len(e.hashes)
                stored_groups.add(e.group)
                for h in e.hashes:
                    assert (e.group, h) not in held, f"batch {seq}: group {e.group} stored {h:016x} twice"
                    held.add((e.group, h))
            else:
                assert type(e) is KvBlockRemoved
                for h in e.hashes:
                    assert (e.group, h) in held, f"batch {seq}: group {e.group} removed {h:016x}, not held"
                    held.discard((e.group, h))
                    removed += 1
    published = {g for g, group in enumerate(kv_groups) if group["kind"] != "index"}
    assert stored_groups == published
    assert removed > 0, "the workload should have evicted something"
    assert held == engine_cached(engine)


def test_ring_layout_is_one_full_attention_group():
    """The ring layout publishes as vLLM does for a model of full-attention layers: group 0."""
    engine = Engine.from_model(
        window_model(HYBRID_LAYERS), config=EngineConfig(device="cpu", block_size=BS, num_blocks=40)
    )
    publisher = KvEventPublisher("tcp://127.0.0.1:*")
    publisher(engine.trace.header)
    engine.trace.listeners.append(publisher)
    engine.generate(random_prompts([9, 13], vocab=97), SamplingParams(max_tokens=3, ignore_eos=True))
    publisher.close()
    events = [e for _, payload in publisher.buffer for e in decode_payload(payload).events]
    assert events and all(e.group == 0 for e in events)
    stored = [e for e in events if type(e) is KvBlockStored]
    assert stored and all((e.spec_kind, e.sliding_window) == ("full_attention", None) for e in stored)
