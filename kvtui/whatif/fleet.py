"""N workers behind a router, each its own scheduler and KV cache of one capacity, stepped on one clock.

Each arrival first brings every worker's clock up to it (steps in flight finish), then the router sees the
workers as they are and picks one. Reported: the fleet's hit rate and the cause of every miss, per-worker load
(requests, prompt tokens) and hit rate, blocks cached on more than one worker at the end of the run.

Regret as Dynamo's router proposal measures it: at each arrival, the longest prefix of the request cached on
any worker (reachable) against the prefix cached on the worker the router chose (achieved); the fleet's
reachable and achieved hit rates (tokens / prompt tokens) and their difference. Both are read at routing
time, so achieved may differ from the hit the chosen worker then serves (an eviction or a block in flight
before admission). The global-cache comparison is a further run: one worker with the fleet's total capacity,
batch budget and sequences (Mooncake's "global cache", its Figure 10).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from kvtui.whatif.causes import MissLedger
from kvtui.whatif.hash_keys import routing_keys
from kvtui.whatif.routers import Router, cached_blocks
from kvtui.whatif.simulate import SimConfig, SimResult, Worker, paused_gc


@dataclass
class FleetResult:
    router: str
    workers: int
    # the fleet as a whole
    result: SimResult
    per_worker: list[dict]
    duplicated_blocks: int
    cached_blocks: int
    # tokens of the longest prefix cached on any worker at arrival, and on the chosen one
    reachable_tokens: int = 0
    achieved_tokens: int = 0

    def as_dict(self) -> dict:
        prompt = self.result.prompt_tokens or 1
        reachable, achieved = self.reachable_tokens / prompt, self.achieved_tokens / prompt
        return {
            "router": self.router,
            "workers": self.workers,
            "capacity_tokens_per_worker": self.result.config.capacity_tokens,
            "token_hit_rate": self.result.token_hit_rate,
            "misses": dict(self.result.causes),
            "per_worker": self.per_worker,
            "duplicated_blocks": self.duplicated_blocks,
            "cached_blocks": self.cached_blocks,
            "reachable_hit_rate": reachable,
            "achieved_hit_rate": achieved,
            "regret": reachable - achieved,
        }


def simulate_fleet(
    requests, config: SimConfig, workers: int, router: Router, hash_ids: bool = False, progress=None
) -> FleetResult:
    started = time.perf_counter()
    ledger = MissLedger(config.block_size)
    fleet = [Worker(config, ledger, hash_ids, name=f"w{i}") for i in range(workers)]
    placed: list[list[str]] = [[] for _ in fleet]
    prompt_of = [0] * workers
    reachable = achieved = 0
    with paused_gc():
        for index, item in enumerate(requests):
            for worker in fleet:
                worker.advance_to(item.arrival)
            keys = routing_keys(item, config.block_size) if config.prefix_cache else []
            overlaps = [cached_blocks(w, keys) for w in fleet]
            choice = router.pick(fleet, keys, overlaps)
            reachable += max(overlaps) * config.block_size
            achieved += overlaps[choice] * config.block_size
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
        router.name,
        workers,
        result,
        per_worker,
        sum(c - 1 for c in seen.values() if c > 1),
        len(seen),
        reachable,
        achieved,
    )
