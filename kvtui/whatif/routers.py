"""Fleet routers: which worker gets an arriving request.

round_robin     workers in turn
random          uniform, seeded
least_loaded    the fewest requests running or waiting (ties: the lowest index)
kv_aware        NVIDIA Dynamo's KV router cost, lowest first:
                    cost = overlap_weight x prefill_blocks + decode_blocks
                prefill_blocks: the request's blocks not cached on that worker; decode_blocks: blocks its
                active requests hold (a queued request: the blocks of its prompt). With a temperature T > 0 a worker is drawn with probability
                softmax(-cost / T) instead (Dynamo's router_temperature).
longest_prefix  the most cached prefix blocks (ties: least loaded)
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

ROUTERS = ("round_robin", "random", "least_loaded", "kv_aware", "longest_prefix")


def cached_blocks(worker, keys: Sequence) -> int:
    """Leading blocks of `keys` in the worker's prefix tree now (a query: changes nothing)."""
    radix = getattr(worker.manager.prefix_cache, "radix", None)
    if radix is None or not keys:
        return 0
    return sum(used for _, used in radix.walk(keys))


def load_of(worker) -> int:
    return len(worker.scheduler.running) + len(worker.scheduler.waiting)


def active_blocks(worker) -> int:
    """Blocks the worker's active requests hold, counting a queued request's prompt as the blocks it will take
    (it was routed there already, as Dynamo counts a request from the moment it is routed)."""
    bs = worker.config.block_size
    held = sum(len(r.block_table) for r in worker.scheduler.running)
    return held + sum(-(-len(r.prompt_token_ids) // bs) for r in worker.scheduler.waiting)


class Router:
    def __init__(self, name: str, seed: int = 0, overlap_weight: float = 1.0, temperature: float = 0.0):
        if name not in ROUTERS:
            raise ValueError(f"unknown router {name!r}: choose one of {', '.join(ROUTERS)}")
        self.name, self.overlap_weight, self.temperature = name, overlap_weight, temperature
        self.rng = random.Random(seed)
        self._next = 0

    def pick(self, workers: list, keys: Sequence, overlaps: Sequence[int] | None = None) -> int:
        """The worker for a request of these block keys; `overlaps`: each worker's cached leading blocks of
        them, when the caller has them already."""
        n = len(workers)
        if overlaps is None and self.name in ("longest_prefix", "kv_aware"):
            overlaps = [cached_blocks(w, keys) for w in workers]
        if self.name == "round_robin":
            self._next += 1
            return (self._next - 1) % n
        if self.name == "random":
            return self.rng.randrange(n)
        if self.name == "least_loaded":
            return min(range(n), key=lambda i: (load_of(workers[i]), i))
        if self.name == "longest_prefix":
            return min(range(n), key=lambda i: (-overlaps[i], load_of(workers[i]), i))
        costs = [
            self.overlap_weight * (len(keys) - overlap) + active_blocks(w)
            for w, overlap in zip(workers, overlaps)
        ]
        if self.temperature <= 0:
            return min(range(n), key=lambda i: (costs[i], i))
        low = min(costs)
        weights = [math.exp(-(c - low) / self.temperature) for c in costs]
        return self.rng.choices(range(n), weights)[0]
