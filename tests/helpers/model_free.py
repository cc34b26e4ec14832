"""A KV-cache manager built from block counts alone: no model, no torch, no K/V memory."""

from __future__ import annotations

from engine.config import EngineConfig
from engine.core.kv_cache import KVCacheManager
from engine.models.shape import ModelShape
from engine.trace import TraceSink

# one full-attention layer of one head: the manager reads only which layers are windows and the bytes per block
SHAPE = ModelShape(
    "model-free", layers=1, q_heads=1, kv_heads=1, head_dim=1, dtype="float32", elem_bytes=4, windows=(None,)
)


def model_free_manager(
    num_blocks: int,
    block_size: int,
    trace: TraceSink | None = None,
    policy: str = "lru",
    prefix_cache: bool = True,
    shape: ModelShape = SHAPE,
    **config,
) -> KVCacheManager:
    config = EngineConfig(
        block_size=block_size, num_blocks=num_blocks, eviction=policy, prefix_cache=prefix_cache, **config
    )
    return KVCacheManager(shape, config, trace or TraceSink(clock=lambda: 0.0))


def run_model_free(manager: KVCacheManager, scheduler, requests: dict, next_token=lambda req: 7) -> list[str]:
    """Step `scheduler` until no work is left, as the engine does but with no model: a chunk that completes its
    sequence gets `next_token(req)`; a request finishes at max_tokens. Returns request ids in finishing order."""
    finished = []
    while scheduler.has_work():
        chunks = scheduler.schedule()
        if not chunks and not scheduler.preempted_this_step:
            raise RuntimeError("the scheduler could not place any request")
        for chunk in chunks:
            req = chunk.request
            req.num_computed += chunk.num_tokens
            if req.num_computed == req.num_tokens:
                req.output_token_ids.append(next_token(req))
                if len(req.output_token_ids) >= req.params.max_tokens:
                    scheduler.finish(req)
                    manager.free(req)
                    finished.append(req.request_id)
                    continue
            manager.cache_blocks(req)
    return finished
