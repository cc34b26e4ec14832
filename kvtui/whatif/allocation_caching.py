"""vLLM's moment of caching for a what-if worker: a block enters the prefix cache when it is allocated for
tokens the step will compute, not after the step computed them (the engine's own moment).

vLLM (v1) caches every full block of a request's scheduled chunk in `allocate_slots`, so a request admitted
later in the same step already finds them (its attention reads them after they are written, layer by layer).
The engine core caches a block once computed, so there two requests that share a prefix and arrive in one step
both compute it. Which requests share a step is the server's timing; with caching at allocation it no longer
matters, only the order of admission does. Whole-block runs (`partial_hits=False`, vLLM's granularity) take it.
"""

from __future__ import annotations

from engine.core.kv_cache import KVCacheManager
from engine.core.request import Request


def cache_on_allocation(manager: KVCacheManager) -> None:
    """From now on `manager.allocate_slots(req, n)` also caches the full blocks of positions [0, computed + n)."""
    allocate = manager.allocate_slots

    def allocate_slots(req: Request, n: int) -> None:
        allocate(req, n)
        computed = req.num_computed
        # the manager caches up to what the request computed: the chunk counts as computed for that moment
        req.num_computed = computed + n
        try:
            manager.cache_blocks(req)
        finally:
            req.num_computed = computed

    manager.allocate_slots = allocate_slots
