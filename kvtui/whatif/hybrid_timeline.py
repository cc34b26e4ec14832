"""The what-if twin of a hybrid model: a workload's requests through vLLM's hybrid cache (hybrid_cache.py:
KV-cache groups sharing one pool, window blocks freed as the request runs, the hybrid hit rule) on the server's
recorded clock when the log has one (the same moments and scheduling as timeline.py), else one request after
another. Torch-free.

    arrive   the request joins the queue (the log's `forwarded`); the queue is admitted first come, first
             served while the head finds its blocks in the pool
    admit    the hybrid hit, then every prompt block allocated in every group and cached
    decode   each output token fed at the time it came: window blocks that left freed first, then its block;
             with no block left the last admitted request is preempted (freed, back to the queue's head)
    finish   every group's blocks freed, newest first

The hits are the first admission's, as vLLM counts cached tokens. A missed token's cause names the group that
cut the hit (`window: group 0 sliding_window (512)`), the match unit, or that nothing was cached.
"""

from __future__ import annotations

from kvtui.whatif.hybrid_cache import HybridCache, HybridRequest
from kvtui.whatif.timeline import _Live, on_the_clock, play, schedule_tokens


def hybrid_cause(cache: HybridCache, req: HybridRequest, full_hit: int) -> str:
    """The cause of the tokens between the hit and what the full group held."""
    if req.limited_by is None or req.hit >= full_hit:
        return "compulsory"
    group = cache.groups[req.limited_by]
    return f"{group.kind}: group {req.limited_by} ({group.label()})"


class HybridTimeline:
    def __init__(
        self,
        groups,
        num_blocks: int,
        block_size: int,
        prefix_match_unit: int | None = None,
        retention_interval: int | None = 0,
    ):
        self.cache = HybridCache(groups, num_blocks, block_size, prefix_match_unit, retention_interval)
        self.events: list[tuple] = []
        self.live: dict[str, _Live] = {}
        self.waiting: list[_Live] = []
        self.running: list[_Live] = []
        self.now = 0.0
        # request id -> (hit tokens, causes of the missed prompt tokens)
        self.hits: dict[str, tuple[int, dict]] = {}
        self.preempted: list[str] = []
        self.refused: list[str] = []

    def run(self, requests) -> dict:
        """request id -> (hit tokens at the first admission, the misses' causes)."""
        timed = on_the_clock(requests)
        if timed is None:
            return self._one_by_one(requests)
        play(self, timed)
        return self.hits

    def _one_by_one(self, requests) -> dict:
        for item in requests:
            req = HybridRequest(item.request_id, list(item.prompt_token_ids()), item.cache_salt)
            if self.cache.never_fits(len(req.tokens)) or not self.cache.admit(req, len(req.tokens)):
                self.refused.append(item.request_id)
                self.hits[item.request_id] = (0, {"too_large": len(req.tokens)})
                continue
            self._record(req)
            # each output token but the last has its K/V computed
            for token in (getattr(item, "output_token_ids", None) or ())[:-1]:
                req.tokens.append(token)
                if self.cache.can_append(req, 1):
                    self.cache.append(req, 1)
            self.cache.free(req)
        return self.hits

    def _record(self, req: HybridRequest) -> None:
        n = len(req.tokens)
        found = req.found
        full_hit = min(max(found.per_group.values(), default=0), found.bound)
        causes = {}
        if full_hit > req.hit:
            causes[hybrid_cause(self.cache, req, full_hit)] = full_hit - req.hit
        left = n - full_hit - 1
        if left > 0:
            causes["compulsory"] = left
        causes["last_token"] = 1
        self.hits[req.request_id] = (req.hit, causes)

    def _admit_waiting(self) -> None:
        cache = self.cache
        while self.waiting:
            entry = self.waiting[0]
            item = entry.item
            if entry.finished:
                self.waiting.pop(0)
                continue
            first = not entry.admitted
            if entry.req is None:
                entry.req = HybridRequest(item.request_id, list(item.prompt_token_ids()), item.cache_salt)
            req = entry.req
            # a readmission brings back what it had produced (its K/V computed again)
            need = item.num_prompt_tokens + (0 if first else entry.produced - 1)
            if cache.never_fits(item.num_prompt_tokens + len(item.output_token_ids)):
                self.refused.append(item.request_id)
                self.hits[item.request_id] = (0, {"too_large": item.num_prompt_tokens})
                entry.finished = True
                self.waiting.pop(0)
                continue
            req.tokens = list(item.prompt_token_ids()) + list(
                item.output_token_ids[: max(0, entry.produced - 1)]
            )
            if not cache.admit(req, need):
                return
            self.waiting.pop(0)
            self.running.append(entry)
            entry.admitted = True
            if first:
                self._record(req)
                req.tokens.append(item.output_token_ids[0])
                self._schedule(entry)

    def _schedule(self, entry: _Live) -> None:
        schedule_tokens(self, entry)

    def _feed(self, entry: _Live, j: int) -> None:
        entry.produced = j + 1
        if entry not in self.running:
            return
        req = entry.req
        while not self.cache.can_append(req, 1):
            victim = self.running[-1]
            self._preempt(victim)
            if victim is entry:
                return
        self.cache.append(req, 1)
        req.tokens.append(entry.item.output_token_ids[j])

    def _preempt(self, entry: _Live) -> None:
        self.preempted.append(entry.item.request_id)
        self.cache.free(entry.req)
        self.running.remove(entry)
        self.waiting.insert(0, entry)

    def _finish(self, entry: _Live) -> None:
        entry.finished = True
        if entry in self.running:
            self.cache.free(entry.req)
            self.running.remove(entry)


def hybrid_job(shared, job) -> dict:
    """runs.py's simulated job for a configuration with KV-cache groups: the twin above at the configuration's
    pool (its capacity in blocks, shared by the groups) and block size."""
    import time

    requests, _ = shared
    config = job.config
    started = time.perf_counter()
    twin = HybridTimeline(
        list(config.kv_groups), config.num_blocks, config.block_size, config.prefix_match_unit
    )
    hits = twin.run(requests)
    prompt = sum(r.num_prompt_tokens for r in requests)
    causes: dict[str, int] = {}
    for _, missed in hits.values():
        for cause, tokens in missed.items():
            causes[cause] = causes.get(cause, 0) + tokens
    point = {
        "capacity_tokens": config.capacity_tokens,
        "block_size": config.block_size,
        "eviction": "lru",
        "method": "simulated",
        "token_hit_rate": sum(h for h, _ in hits.values()) / prompt if prompt else 0.0,
        "misses": causes,
        "kv_groups": len(config.kv_groups),
        "prefix_match_unit": config.prefix_match_unit or config.block_size,
        "evictions": twin.cache.evictions,
        "preemptions": len(twin.preempted),
        "wall_seconds": round(time.perf_counter() - started, 3),
    }
    point.update({k: getattr(config, k) for k in job.vary})
    return {"point": point, "misses": causes, "detail": None, "hits": hits if job.want_hits else None}


def hybrid_ceiling(requests, config) -> float:
    """The token hit rate of a pool that never evicts, for the configuration's groups (what its groups keep
    cached still limits it)."""
    total = sum(r.num_prompt_tokens + r.num_output_tokens for r in requests)
    blocks = (total // config.block_size + 2 * len(requests) + 1) * len(config.kv_groups) + 1
    twin = HybridTimeline(list(config.kv_groups), blocks, config.block_size, config.prefix_match_unit)
    hits = twin.run(requests)
    prompt = sum(r.num_prompt_tokens for r in requests)
    return sum(h for h, _ in hits.values()) / prompt if prompt else 0.0
