"""A hybrid model's KV cache as vLLM keeps it, with no model: KV-cache groups (engine/core/hybrid_hit.py) that
share one block pool, for the what-if twin (hybrid_timeline.py). Torch-free.

    pool      block 0 is the null block; the rest start free. Free blocks wait in an LRU queue: a freed block
              goes to its tail, a new block comes from its head, and a cached block taken from there is
              evicted (its hash forgotten). A block is cached under (group, chained hash) once full; two
              requests computing one block at once cache two copies of one hash.
    admit     the hybrid hit (every group must serve it); the hit's blocks are touched (taken out of the free
              queue), a sliding-window group only those inside the window before the hit point and a
              Mamba-style group only the state at it; the rest of the prompt's blocks are allocated in every
              group, in group order, and cached
    append    a sliding-window group first frees the blocks that left the window of the tokens computed so
              far (newest first: they stay cached until evicted), then every group gets room for the token
    free      each group's blocks, in group order, newest first (the tail blocks are evicted first)
    retain    a window or Mamba-style group caches only the blocks a later hit can use (vLLM's
              prefix_cache_retention_interval, 0 by default: the run before the prompt's last token and the
              run before a shared-prefix junction; None: every block)

The request's `hit` is what vLLM reports as its cached tokens; `limits` names the group that cut it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from engine.core.hybrid_hit import hybrid_hit, retained_blocks
from engine.models.kv_groups import FULL, MAMBA, SLIDING, KVGroup

NULL = 0


def block_hashes(tokens: list[int], block_size: int, salt: str | None = None) -> list[int]:
    """The chained hash of each whole block of `tokens`."""
    out, parent = [], hash(("root", salt))
    for i in range(len(tokens) // block_size):
        parent = hash((parent, tuple(tokens[i * block_size : (i + 1) * block_size])))
        out.append(parent)
    return out


@dataclass
class HybridRequest:
    request_id: str
    tokens: list[int]
    salt: str | None = None
    # per group: the block ids of its logical blocks (NULL where a window dropped one)
    blocks: list[list[int]] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)
    computed: int = 0
    hit: int = 0
    limited_by: int | None = None
    # the first admission's hybrid hit (engine/core/hybrid_hit.py's HybridHit) and its junction
    found: object = None
    junction: int = 0
    prompt_tokens: int = 0

    def __post_init__(self):
        self.prompt_tokens = self.prompt_tokens or len(self.tokens)


class HybridCache:
    def __init__(
        self,
        groups: list[KVGroup],
        num_blocks: int,
        block_size: int,
        prefix_match_unit=None,
        retention_interval: int | None = 0,
    ):
        self.groups = groups
        self.block_size = block_size
        self.unit = prefix_match_unit
        self.retention = retention_interval
        self.free_queue: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, num_blocks))
        self.ref = [0] * num_blocks
        self.key: list[tuple | None] = [None] * num_blocks
        # (group, hash) -> the block ids caching it, oldest first
        self.cached: dict[tuple, list[int]] = {}
        self.evictions = 0

    @property
    def free_blocks(self) -> int:
        return len(self.free_queue)

    def never_fits(self, tokens: int) -> bool:
        """Whether room for `tokens` in every group exceeds the whole pool (such a request never runs)."""
        return len(self.groups) * -(-tokens // self.block_size) > len(self.ref) - 1

    # ------------------------------------------------------------------ the hit
    def find_hit(self, req: HybridRequest):
        hashes = self._hashes(req)
        return hybrid_hit(
            self.groups,
            lambda g, i: (g, hashes[i]) in self.cached,
            len(req.tokens),
            self.block_size,
            self.unit,
        )

    def _hashes(self, req: HybridRequest) -> list[int]:
        if len(req.hashes) < len(req.tokens) // self.block_size:
            req.hashes = block_hashes(req.tokens, self.block_size, req.salt)
        return req.hashes

    def _kept_from(self, group: KVGroup, computed: int) -> int:
        """The first logical block a group still needs after `computed` tokens."""
        if group.kind == SLIDING:
            return max(0, computed - group.window + 1) // self.block_size
        if group.kind == MAMBA:
            return max(0, computed // self.block_size - 1)
        return 0

    # ------------------------------------------------------------------ admission
    def blocks_to_admit(self, req: HybridRequest, hit: int, tokens: int) -> int:
        """Free blocks admitting `req` with a hit of `hit` tokens and room for `tokens` takes."""
        need = 0
        for g, group in enumerate(self.groups):
            first = self._kept_from(group, hit)
            hit_blocks = self._hit_blocks(g, req, hit, first)
            need += max(0, -(-tokens // self.block_size) - max(first, hit // self.block_size))
            need += sum(1 for b in hit_blocks if self.ref[b] == 0)
        return need

    def _hit_blocks(self, g: int, req: HybridRequest, hit: int, first: int) -> list[int]:
        hashes = self._hashes(req)
        return [self.cached[(g, hashes[i])][0] for i in range(first, hit // self.block_size)]

    def admit(self, req: HybridRequest, tokens: int) -> bool:
        """Admit `req` with room for its first `tokens` (a readmission: the hit again). False when the pool
        cannot hold it (nothing changed)."""
        found = self.find_hit(req)
        hit = found.tokens
        if self.blocks_to_admit(req, hit, tokens) > self.free_blocks:
            return False
        req.hit, req.limited_by = hit, found.limited_by
        if req.found is None:
            req.found = found
            # vLLM's shared-prefix junction: the full group found more than the hit
            req.junction = found.longest if found.longest > hit else 0
        req.blocks, req.cached = [], []
        for g, group in enumerate(self.groups):
            first = self._kept_from(group, hit)
            hit_blocks = self._hit_blocks(g, req, hit, first)
            self._touch(hit_blocks)
            req.blocks.append([NULL] * first + hit_blocks)
            req.cached.append(hit // self.block_size)
        req.computed = hit
        self._grow(req, tokens)
        return True

    # ------------------------------------------------------------------ running
    def can_append(self, req: HybridRequest, tokens: int) -> bool:
        need = 0
        for g, group in enumerate(self.groups):
            have = len(req.blocks[g])
            first = self._kept_from(group, req.computed)
            freed = sum(1 for b in req.blocks[g][:first] if b != NULL and self.ref[b] == 1)
            need += max(0, -(-(req.computed + tokens) // self.block_size) - have) - freed
        return need <= self.free_blocks

    def append(self, req: HybridRequest, tokens: int) -> None:
        """Room for `tokens` more (their K/V computed): the window's dropped blocks freed first."""
        self.drop_outside_window(req)
        self._grow(req, req.computed + tokens)

    def drop_outside_window(self, req: HybridRequest) -> None:
        for g, group in enumerate(self.groups):
            if group.kind == FULL:
                continue
            first = min(self._kept_from(group, req.computed), len(req.blocks[g]))
            row, freed = req.blocks[g], []
            for i in range(first - 1, -1, -1):
                if row[i] == NULL:
                    break
                freed.append(row[i])
                row[i] = NULL
            self._release(freed)

    def _grow(self, req: HybridRequest, tokens: int) -> None:
        for g in range(len(self.groups)):
            row = req.blocks[g]
            n = -(-tokens // self.block_size) - len(row)
            if n > 0:
                row.extend(self._take(n))
        req.computed = tokens
        self._cache(req)

    def _cache(self, req: HybridRequest) -> None:
        full = min(req.computed, len(req.tokens)) // self.block_size
        hashes = self._hashes(req)
        unit = self.unit or self.block_size
        boundaries = (req.prompt_tokens - 1, req.junction)
        for g, group in enumerate(self.groups):
            row = req.blocks[g]
            kept = retained_blocks(group, self.block_size, boundaries, unit, self.retention)
            for i in range(req.cached[g], min(full, len(hashes))):
                b = row[i]
                if b == NULL or self.key[b] is not None or (kept is not None and not kept(i)):
                    continue
                self.key[b] = (g, hashes[i])
                self.cached.setdefault((g, hashes[i]), []).append(b)
            req.cached[g] = max(req.cached[g], full)

    def free(self, req: HybridRequest) -> None:
        for row in req.blocks:
            self._release([b for b in reversed(row) if b != NULL])
        req.blocks, req.cached = [], []

    # ------------------------------------------------------------------ the pool
    def _touch(self, blocks: list[int]) -> None:
        for b in blocks:
            if self.ref[b] == 0:
                self.free_queue.pop(b, None)
            self.ref[b] += 1

    def _release(self, blocks: list[int]) -> None:
        for b in blocks:
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free_queue[b] = None

    def _take(self, n: int) -> list[int]:
        if n > len(self.free_queue):
            raise RuntimeError(f"the pool has {len(self.free_queue)} free blocks, {n} asked")
        out = []
        for _ in range(n):
            b, _ = self.free_queue.popitem(last=False)
            key = self.key[b]
            if key is not None:
                copies = self.cached[key]
                copies.remove(b)
                if not copies:
                    del self.cached[key]
                self.key[b] = None
                self.evictions += 1
            self.ref[b] = 1
            out.append(b)
        return out
