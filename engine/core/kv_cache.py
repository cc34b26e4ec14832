"""The KV-cache manager: the one front door of the cache for the scheduler and the engine. Torch-free: it deals
in block ids, and what the worker must do to K/V memory is data it records (vLLM v1's shape).

It owns the parts, each one concept in its own module:
    BlockPool    (blocks.py)        physical blocks, free list, ref counts; the copies the worker must make
    PrefixCache  (prefix_cache.py)  the prefix tree of whole blocks and the tails after them, or none at all;
                 (tiered_cache.py)  with host (and disk) below the pool: evicted blocks go there, matches load them
    RingManager  (rings.py)         window layers' rings: rows, heads, snapshots, restarts
    GroupBlocks  (group_blocks.py)  window_layout="paged": the other KV-cache groups' tables, hashes, hit rule
and speaks one small vocabulary (as vLLM v1's KVCacheManager does):
    probe         what a prompt would reuse (a query: changes nothing)
    admit         share the longest usable cached prefix (loading lower-tier blocks), lock it, explain the match
    can_append / blocks_to_append / tokens_that_fit / allocate_slots   room for the next tokens (copy first)
    cache_blocks  put newly filled blocks into the tree
    fork          share every block with a copy of a request
    truncate      carry out an edit (engine/core/edit_cuts.py): keep [0, m), copy m's block, release the rest
    free          finish or preemption: cache what was computed, drop the lock, release the blocks and rings
A request's regions: [0, num_cached) shared from the tree at admission; [num_cached, num_computed) computed by
the request, whose full blocks enter the tree as they fill (so a preempted or edited request, or the next turn of
a chat, finds them); [num_computed, end) still to compute. A block's life: allocated (evicting the prefix cache's
choice first when the free list is empty), shared, released; at ref count 0 the prefix cache keeps it (cached)
or the pool frees it. A copy-on-write allocates the copy, records it for the worker (`pool.take_copies()`), and
releases the original.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from engine.config import EngineConfig
from engine.core.blocks import BlockPool
from engine.core.edit_cuts import EditCuts
from engine.core.eviction import evict_to_free_list
from engine.core.group_blocks import GroupBlocks, GroupTrace
from engine.core.miss_explainer import PrefixMatch
from engine.core.prefix_cache import NoPrefixCache, PrefixCache, RadixPrefixCache
from engine.core.request import Request, Status
from engine.core.rings import RingManager
from engine.core.tiered_cache import TieredPrefixCache
from engine.core.tiers import LowerTiers
from engine.models.kv_groups import paged_groups, table_group
from engine.models.shape import ModelShape
from engine.trace.metrics import HitRateTracker
from engine.trace.writer import TraceSink


class KVCacheManager(EditCuts):
    def __init__(
        self,
        shape: ModelShape,
        config: EngineConfig,
        trace: TraceSink,
        token_text: Callable[[int], str] = str,
        cache_generated: bool = True,
        cache_on_allocation: bool = False,
    ):
        self.trace = trace
        # False: only prompt blocks enter the prefix cache (generated tokens of unknown content: hash-id
        # workloads, whose next turn's ids already carry them)
        self.cache_generated = cache_generated
        # True: a block enters the cache when allocated for the tokens a step computes (vLLM's moment: a request
        # admitted later in the same step finds it), not once computed
        self.cache_on_allocation = cache_on_allocation
        self.token_text = token_text
        self.block_size = bs = config.block_size
        # window_layout="paged": the table group's block events name it (engine/core/group_blocks.py)
        groups = paged_groups(shape.windows) if config.window_layout == "paged" else None
        num_blocks = config.pool_blocks(shape)
        if groups is not None:
            trace = GroupTrace(trace, table_group(groups))
            # no rings: every layer pages its K/V
            shape = replace(shape, windows=(None,) * shape.layers)
        self.pool = BlockPool(num_blocks, bs, trace)
        # host (and disk) below the pool, or None
        tiers = LowerTiers.for_config(config, shape, self.pool, trace, token_text)
        self.prefix_cache: PrefixCache
        if not config.prefix_cache:
            self.prefix_cache = NoPrefixCache(bs)
        elif tiers is None:
            self.prefix_cache = RadixPrefixCache(
                self.pool, trace, config.eviction, token_text, config.partial_hits
            )
        else:
            self.prefix_cache = TieredPrefixCache(
                self.pool, trace, config.eviction, token_text, config.partial_hits, tiers
            )
        self.rings = RingManager(shape, bs, trace)
        self.groups = (
            GroupBlocks.none(self.pool, bs, trace)
            if groups is None
            else GroupBlocks(
                groups, table_group(groups), self.pool, bs, self.trace, config.retention_interval
            )
        )
        self.hit_rates = HitRateTracker(config.hit_rate_window, tiers.names if tiers else ())

    # --- queries ------------------------------------------------------------------------------------------
    @property
    def tiers(self) -> LowerTiers | None:
        """Host (and disk) below the pool, behind the prefix cache; None with one tier."""
        return self.prefix_cache.tiers

    def probe(self, tokens: list[int], cache_salt: str | None) -> PrefixMatch:
        """What admission would reuse, whole blocks and the leading tokens of one more; changes nothing."""
        match = self.prefix_cache.match(tokens, cache_salt)
        partial = self.prefix_cache.partial(match, tokens, cache_salt)
        if partial is not None:
            match.partial_tokens = partial[1]
        return match

    @property
    def capacity_tokens(self) -> int:
        """Tokens the whole pool holds: no sequence (prompt + max_tokens) may need more."""
        return self.pool.num_blocks * self.block_size

    def num_cached(self) -> int:
        """Blocks nobody uses that the cache keeps (tree blocks, tails, other groups' blocks)."""
        return self.prefix_cache.num_cached() + self.groups.num_evictable()

    def num_available(self) -> int:
        """Blocks an allocation could get: free ones plus cached ones that may be evicted."""
        return self.pool.num_free() + self.prefix_cache.num_evictable() + self.groups.num_evictable()

    def can_allocate(self, n: int) -> bool:
        """n blocks are free, or can be made free by eviction (the tree walk only when the free list is short,
        and only until it has found enough)."""
        free = self.pool.num_free() + self.groups.num_evictable()
        return n <= free or self.prefix_cache.has_evictable(n - free)

    # --- blocks: the pool's bookkeeping, the prefix cache's decisions -------------------------------------
    def allocate_block(self, request_id: str, logical: int, group: int | None = None) -> int:
        """A free block for the request's logical block (in `group`, None: the table's); when none is free, the
        oldest cached block of the other groups, else the prefix cache's eviction choice."""
        if not self.pool.free:
            evicted = self._evict_one()
            if evicted is not None:
                self.pool.free.append(evicted)
        return self.pool.allocate(request_id, logical, group)

    def _evict_one(self) -> int | None:
        evicted = self.groups.evict_one()
        return self.prefix_cache.evict_one() if evicted is None else evicted

    def release_block(self, physical: int, request_id: str, logical: int) -> None:
        """Drop a reference; the last one leaves the block cached (if the prefix cache keeps it) or free."""
        if self.pool.release(physical, request_id, logical) == 0 and not self.prefix_cache.keep_on_release(
            physical
        ):
            self.pool.free_block(physical)

    def release_table(self, table: list[int], request_id: str, start_logical: int = 0) -> None:
        """Drop a table's references from `start_logical` on, last block first (so tails are evicted first)."""
        for logical in range(len(table) - 1, start_logical - 1, -1):
            self.release_block(table[logical], request_id, logical)
        del table[start_logical:]

    def needs_copy(self, physical: int) -> bool:
        """Writing into this block would change what another table or the prefix cache holds."""
        return self.pool.ref_counts[physical] > 1 or self.prefix_cache.holds(physical)

    def copy_on_write(self, table: list[int], logical: int, request_id: str, num_tokens: int) -> int:
        """Give `request_id` its own copy of a shared block before it writes into it; returns the block to use.
        The copy of K/V is recorded for the worker (`pool.take_copies()`)."""
        src = table[logical]
        if not self.needs_copy(src):
            return src
        dst = self.allocate_block(request_id, logical)
        self.pool.copy(src, dst, request_id, logical, num_tokens)
        table[logical] = dst
        self.release_block(src, request_id, logical)
        return dst

    # --- admission ----------------------------------------------------------------------------------------
    def admit(self, req: Request) -> None:
        """Share the longest cached prefix the request can use exactly, lock its path, explain, count the hit."""
        tokens = req.tokens
        matchable = max(len(tokens) - 1, 0) // self.block_size
        # the request's chain
        hashes = self.prefix_cache.hashes(req, tokens, matchable)
        match = self.prefix_cache.match(tokens, req.cache_salt, hashes)
        partial = self.prefix_cache.partial(match, tokens, req.cache_salt)
        if match.lower:
            self.prefix_cache.fit_loads(match, self.can_allocate, self.num_available)
        whole = match.num_tokens
        # window layers restart where their rings are exact (engine/core/rings.py): a ring_resume event, and a ring row
        usable = self.rings.resume(req, whole + (partial[1] if partial else 0))
        # window_layout="paged": the longest hit every KV-cache group serves (engine/core/group_blocks.py)
        if self.groups.enabled:
            hit, found, limiting = self.groups.longest_hit(hashes[0] if hashes else [], len(match.blocks))
            usable = min(usable, hit * self.block_size)
            if not req.matched_before:
                req.junction = self.groups.junction(len(match.blocks), hit)
            if limiting is not None:
                match.detail = {**match.detail, "limiting_group": limiting}
        if usable < whole:
            keep = usable // self.block_size
            matched = len(match.blocks) + len(match.lower)
            match.detail = {**match.detail, "matched_blocks": matched, "window_backoff": True}
            match.lower = match.lower[: max(0, keep - len(match.blocks))]
            match.blocks, match.keys, match.reason = match.blocks[:keep], match.keys[:keep], "window"
            if match.tiers is not None:
                match.tiers = match.tiers[:keep]
            partial = None
        elif partial is not None and usable - whole < partial[1]:
            partial = (partial[0], usable - whole) if usable > whole else None
        for logical, physical in enumerate(match.blocks):
            self.pool.share(physical, req.request_id, logical)
            req.block_table.append(physical)
        if self.groups.enabled:
            self.groups.share_hit(req.request_id, found, len(match.blocks))
        req.lock_node = self.prefix_cache.acquire(match, req.request_id)
        if match.lower:
            self.prefix_cache.load_lower(req, match, tokens, hashes, self.allocate_block)
        # the block is cached: allocate_slots copies it before the first write
        if partial is not None:
            physical, same = partial
            self.pool.share(physical, req.request_id, len(match.blocks))
            req.block_table.append(physical)
            match.partial_tokens = same
            match.detail = {**match.detail, "reused_partial": same}
            # every token but the last came from the cache
            if match.num_tokens == match.matchable_tokens:
                match.reason = "full_match"
        first_time = not req.matched_before
        req.num_computed = match.num_tokens
        # cached tokens: what the cache served at the first lookup (a readmission re-matches
        if first_time:
            # its own blocks, which the cache did not serve)
            req.num_cached = match.num_tokens
        req.blocks_in_tree = len(match.blocks)
        req.attached = True
        fields = match.event_fields(req.request_id, self.token_text)
        if not first_time:
            # not counted again in hit rates
            fields["detail"] = {**fields["detail"], "readmission": True}
        self.trace.emit("prefix_match", **fields)
        if first_time:
            req.matched_before = True
            self.hit_rates.record_match(match)
            self.trace.emit("hit_rates", **self.hit_rates.event_fields())

    def can_admit(self, req: Request, budget: int) -> bool:
        """At least one block's worth of its first chunk fits, in every KV-cache group (admission never
        preempts)."""
        first = min(req.num_tokens, budget, self.block_size)
        return self.can_allocate(self.pool.blocks_for(first) * self.groups.count)

    # --- room for the next tokens -------------------------------------------------------------------------
    def _needs_copy_first(self, req: Request) -> bool:
        """The block the next token lands in is shared (fork) or cached (prefix tree, tail): copy it first."""
        offset = req.num_computed % self.block_size
        logical = req.num_computed // self.block_size
        if not offset or logical >= len(req.block_table):
            return False
        return self.needs_copy(req.block_table[logical])

    def blocks_to_append(self, req: Request, n: int) -> int:
        """New blocks n more tokens of the request take (the copy of a shared block first included)."""
        copy = int(self._needs_copy_first(req))
        new = self.pool.blocks_for(req.num_computed + n) - len(req.block_table) + copy
        # a block position takes a block in every KV-cache group
        return new * self.groups.count

    def can_append(self, req: Request, n: int) -> bool:
        return self.can_allocate(self.blocks_to_append(req, n))

    def tokens_that_fit(self, req: Request) -> int:
        """New tokens the request could take if every free and evictable block went to it."""
        copy = int(self._needs_copy_first(req))
        available = self.num_available() // self.groups.count
        return (len(req.block_table) + available - copy) * self.block_size - req.num_computed

    def allocate_slots(self, req: Request, n: int) -> None:
        """Blocks for positions [num_computed, num_computed + n); call after can_append said yes."""
        start = req.num_computed
        rid = req.request_id
        # window groups give back what left the window first
        self.groups.skip(rid, start)
        if self._needs_copy_first(req):
            logical, offset = divmod(start, self.block_size)
            self.copy_on_write(req.block_table, logical, rid, offset)
            self.groups.copy_first(rid, logical, offset, self.allocate_block)
        end = self.pool.blocks_for(start + n)
        self.groups.allocate(rid, end, self.allocate_block, before_table=True)
        for logical in range(len(req.block_table), end):
            req.block_table.append(self.allocate_block(rid, logical))
        self.groups.allocate(rid, end, self.allocate_block, before_table=False)
        if self.cache_on_allocation:
            self.cache_blocks(req, start + n)

    # --- caching and freeing ------------------------------------------------------------------------------
    def _cacheable(self, req: Request, computed: int | None = None) -> int:
        """Positions of the request whose K/V may enter the prefix cache: all it computed, or only its prompt."""
        computed = req.num_computed if computed is None else computed
        return computed if self.cache_generated else min(computed, len(req.prompt_token_ids))

    def cache_blocks(self, req: Request, computed: int | None = None) -> None:
        """Put the request's newly filled blocks (up to `computed`, default what it computed) into the tree and
        move its lock to the end of its path."""
        full = min(self._cacheable(req, computed) // self.block_size, len(req.block_table))
        if full <= req.blocks_in_tree:
            return
        tokens = req.token_slice(0, full * self.block_size)
        req.lock_node = self.prefix_cache.insert(
            tokens,
            req.block_table[:full],
            req.cache_salt,
            req.request_id,
            locked=req.lock_node,
            hashes=self.prefix_cache.hashes(req, tokens, full),
        )
        req.blocks_in_tree = full
        if self.groups.enabled and req.block_keys:
            boundaries = (len(req.prompt_token_ids) - 1, req.junction)
            self.groups.store(req.request_id, req.block_keys, full, boundaries)

    def free(self, req: Request) -> None:
        """Finish or preemption: cache what it computed, drop its lock, release its blocks (cached ones stay)
        and its rings (ring snapshots stay)."""
        self.cache_blocks(req)
        self._keep_tail(req)
        self.prefix_cache.unlock(req.lock_node, req.request_id)
        req.lock_node = None
        self.release_table(req.block_table, req.request_id)
        self.groups.free(req.request_id)
        req.blocks_in_tree = 0
        req.attached = False
        self.rings.free(req.request_id)

    def _keep_tail(self, req: Request) -> bool:
        """Keep the partly filled block after the request's whole blocks as a tail (before releasing it)."""
        computed = self._cacheable(req)
        full, valid = divmod(computed, self.block_size)
        table = req.block_table
        if not valid or len(table) <= full:
            return False
        physical = table[full]
        if self.prefix_cache.holds(physical) or self.pool.ref_counts[physical] != 1:
            return False
        # the prompt alone when the tail lies in it: no copy of the whole sequence
        tokens = req.prompt_token_ids if computed <= len(req.prompt_token_ids) else req.tokens
        hashes = self.prefix_cache.hashes(req, tokens, full) if full else ([], [])
        if hashes is None:
            return False
        return self.prefix_cache.keep_tail(
            hashes[0][:full],
            req.cache_salt,
            physical,
            list(tokens[full * self.block_size : computed]),
        )

    # --- forks --------------------------------------------------------------------------------------------
    def fork(self, parent: Request, child: Request) -> None:
        """A running parent's child shares every block, the lock and the rings. Any other child waits with an
        empty table and matches the cache when admitted, as a new request does (an edited parent waiting for
        readmission holds its kept prefix, whose whole blocks are in the tree under its lock)."""
        if parent.status is not Status.RUNNING:
            return
        for logical, physical in enumerate(parent.block_table):
            self.pool.share(physical, child.request_id, logical)
            child.block_table.append(physical)
        if parent.lock_node is not None:
            self.prefix_cache.lock(parent.lock_node, child.request_id)
            child.lock_node = parent.lock_node
        child.blocks_in_tree = parent.blocks_in_tree
        child.matched_before = True
        child.junction = parent.junction
        child.attached = True
        self.rings.fork(parent.request_id, child.request_id)
        self.groups.fork(parent.request_id, child.request_id)

    def evict(self, num_blocks: int) -> list[int]:
        """Evict up to `num_blocks` cached blocks now (tails first) onto the free list (tests, CLI)."""
        return evict_to_free_list(self.pool, self._evict_one, num_blocks)
