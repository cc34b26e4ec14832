"""The miss explainer in vLLM's paged layout names the KV-cache group that cut a hit: a real engine on a tiny
Gemma 3 (two window groups of W=8 and the full group), whose window groups lost the blocks a repeated prompt's
hit needs while the full group kept them all."""

from __future__ import annotations

import torch
import transformers

from engine.core.request import SamplingParams
from engine.engine import Engine, EngineConfig
from kvtui.state.cache_state import CacheState
from kvtui.widgets.miss import explain
from tests.helpers.tiny_trace import HYBRID


def test_a_hit_cut_by_a_window_group_names_it_beside_what_the_full_group_held():
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.Gemma3TextConfig(**HYBRID), dtype=torch.float32
    ).eval()
    model.generation_config.eos_token_id = None
    # every window block stays cached (retention_interval=None), so that eviction is what cuts the hit
    config = EngineConfig(
        device="cpu",
        block_size=4,
        num_blocks=26,
        max_batched_tokens=24,
        window_layout="paged",
        retention_interval=None,
    )
    engine = Engine.from_model(model, config=config)
    events: list[dict] = []
    engine.trace.listeners.append(events.append)
    params = SamplingParams(max_tokens=1, ignore_eos=True)
    prompt = list(range(10, 34))
    engine.generate([prompt], params)
    # a new prompt evicts the oldest cached blocks: the window groups' early ones, released first
    engine.generate([list(range(40, 56))], params)
    engine.generate([prompt], params)
    state = CacheState(engine.trace.header)
    for event in events:
        state.apply(event)
    rid = [e["request_id"] for e in events if e["type"] == "request_arrived"][-1]
    match = state.requests[rid].match
    assert match["reason"] == "window" and match["matched_tokens"] == 8
    text = str(explain(state, state.requests[rid]))
    assert "g2 full holds 20 tokens" in text
    assert "g0 window 8 needs the blocks of the last 8 tokens before the hit point" in text
    assert "the hit is 8 tokens" in text
