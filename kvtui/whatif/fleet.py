"""N workers behind a router, each its own scheduler and KV cache of one capacity, stepped on one clock.

Each arrival first brings every worker's clock up to it (steps in flight finish), then the router sees the
workers as they are and picks one. Reported: the fleet's hit rate and the cause of every miss, per-worker load
(requests, prompt tokens) and hit rate, blocks cached on more than one worker at the end of the run.
The regret and the global-cache comparison are further runs (`compare_fleet`): the same fleet under the
longest-cached-prefix router, and one worker with the fleet's total capacity, batch budget and sequences
(Mooncake's "global cache", its Figure 10).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, replace

from engine.core.hashing import block_hashes
from kvtui.whatif.causes import MissLedger
from kvtui.whatif.routers import Router
from kvtui.whatif.simulate import SimConfig, SimResult, Worker, paused_gc, simulate


@dataclass
class FleetResult:
    router: str
    workers: int
    # the fleet as a whole
    result: SimResult
    per_worker: list[dict]
    duplicated_blocks: int
    cached_blocks: int


def simulate_fleet(
    requests, config: SimConfig, workers: int, router: Router, hash_ids: bool = False, progress=None
) -> FleetResult:
    started = time.perf_counter()
    ledger = MissLedger(config.block_size)
    fleet = [Worker(config, ledger, hash_ids, name=f"w{i}") for i in range(workers)]
    placed: list[list[str]] = [[] for _ in fleet]
    prompt_of = [0] * workers
    with paused_gc():
        for index, item in enumerate(requests):
            for worker in fleet:
                worker.advance_to(item.arrival)
            prompt = item.prompt_token_ids()
            matchable = max(len(prompt) - 1, 0) // config.block_size
            keys = (
                block_hashes(prompt[: matchable * config.block_size], config.block_size, item.cache_salt)[0]
                if config.prefix_cache
                else []
            )
            choice = router.pick(fleet, keys)
            fleet[choice].add(item)
            placed[choice].append(item.request_id)
            prompt_of[choice] += item.num_prompt_tokens
            if progress is not None and not index % 64:
                progress(index, fleet[0].now)
        for worker in fleet:
            worker.drain()
    per_worker = []
    for i, worker in enumerate(fleet):
        records = [ledger.requests[rid] for rid in placed[i]]
        hits = sum(r.hit_tokens for r in records)
        per_worker.append(
            {
                "worker": i,
                "requests": len(records),
                "prompt_tokens": prompt_of[i],
                "token_hit_rate": hits / prompt_of[i] if prompt_of[i] else 0.0,
                "preemptions": worker.preemptions,
            }
        )
    seen = Counter()
    for worker in fleet:
        seen.update(worker.cached_keys())
    prompt, hits, causes = ledger.totals()
    result = SimResult(
        config,
        len(requests),
        prompt,
        hits,
        causes,
        ledger,
        sum(w.steps for w in fleet),
        sum(w.preemptions for w in fleet),
        max(w.now for w in fleet),
        time.perf_counter() - started,
    )
    return FleetResult(
        router.name, workers, result, per_worker, sum(c - 1 for c in seen.values() if c > 1), len(seen)
    )


def compare_fleet(
    requests, config: SimConfig, workers: int, router: Router, hash_ids: bool = False, progress=None
) -> dict:
    """The fleet, the same fleet with the longest-prefix router (regret), and one shared cache of the same
    total capacity (global cache)."""
    fleet = simulate_fleet(requests, config, workers, router, hash_ids, progress)
    best = simulate_fleet(requests, config, workers, Router("longest_prefix"), hash_ids, progress)
    shared = replace(
        config,
        capacity_tokens=config.capacity_tokens * workers,
        max_batched_tokens=config.max_batched_tokens * workers,
        max_num_seqs=config.max_num_seqs * workers,
    )
    one = simulate(requests, shared, hash_ids, progress=progress)
    return {
        "router": router.name,
        "workers": workers,
        "capacity_tokens_per_worker": config.capacity_tokens,
        "token_hit_rate": fleet.result.token_hit_rate,
        "misses": dict(fleet.result.causes),
        "per_worker": fleet.per_worker,
        "duplicated_blocks": fleet.duplicated_blocks,
        "cached_blocks": fleet.cached_blocks,
        "longest_prefix_token_hit_rate": best.result.token_hit_rate,
        "regret": best.result.token_hit_rate - fleet.result.token_hit_rate,
        "global_cache_token_hit_rate": one.token_hit_rate,
    }
