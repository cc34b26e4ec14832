"""A real trace of our engine on a tiny random hybrid model (2 sliding-window layers W=8, 1 full layer), recorded
in memory for the UI and export tests: chunked prefill, a shared prefix, an edit, evictions and a preemption.

tests/kvtui/data/hybrid_tiny.jsonl is one such run saved (`python -m tests.helpers.tiny_trace OUT`), for snapshots;
tests/kvtui/data/paged_tiny.jsonl the same model and requests in vLLM's paged layout, its three KV-cache groups
sharing a pool of 24 blocks (`python -m tests.helpers.tiny_trace OUT paged`)."""

from __future__ import annotations

import functools

import torch
import transformers

HYBRID = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=48,
    max_position_embeddings=1024,
    num_hidden_layers=3,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    sliding_window=8,
    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
)


@functools.cache
def hybrid_trace(
    num_blocks: int = 12, max_batched_tokens: int = 24, window_layout: str = "ring"
) -> tuple[dict, tuple[dict, ...]]:
    from engine.core.request import SamplingParams
    from engine.engine import Engine, EngineConfig

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.Gemma3TextConfig(**HYBRID), dtype=torch.float32
    ).eval()
    model.generation_config.eos_token_id = None
    engine = Engine.from_model(
        model,
        config=EngineConfig(
            device="cpu",
            block_size=4,
            num_blocks=num_blocks,
            max_batched_tokens=max_batched_tokens,
            window_layout=window_layout,
        ),
    )
    events: list[dict] = []
    engine.trace.listeners.append(events.append)
    from engine.worker.machine_probe import emit_roofline

    # measured on this machine, as `kvtui record` does
    emit_roofline(engine)
    shared = list(range(10, 30))
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    first = engine.submit(shared + [40, 41, 42], params)
    while engine.has_unfinished():
        engine.step()
    # a prefix hit, chunked behind the budget
    engine.submit(shared + [50, 51], params)
    # fills the pool
    engine.submit(list(range(60, 90)), SamplingParams(max_tokens=10, ignore_eos=True))
    engine.edit(first, 5, [77], kind="replace")
    while engine.has_unfinished():
        engine.step()
    return engine.trace.header, tuple(events)


if __name__ == "__main__":
    import sys

    from engine.trace import TraceWriter

    paged = sys.argv[2:] == ["paged"]
    header, events = hybrid_trace(24, window_layout="paged") if paged else hybrid_trace()
    writer = TraceWriter(sys.argv[1])
    writer.write_header(header)
    for event in events:
        writer.write(event)
    writer.close()
