"""The prefix cache with tiers below the device (engine/core/tiers.py: host, and disk in what-if runs).

Behind the prefix cache's interface (engine/core/prefix_cache.py), it
- matches on past the device tree into the tiers (`match`: the blocks found below are `PrefixMatch.lower`);
- keeps of those the blocks the device can take (`fit_loads`), then, once the device part is shared and
  locked, loads them (`load_lower`): a device block for each (evicting, and so demoting, others if it must),
  the copy for the worker, and the blocks into the tree under the request's lock, as if it had computed them;
- demotes what the device evicts and drops a lower copy of a block the device holds again: its tree
  (`TieredRadix`) tells the tiers as it evicts and inserts, and remembers what left the last tier.
"""

from __future__ import annotations

from engine.core.blocks import BlockPool
from engine.core.hashing import block_hashes
from engine.core.miss_explainer import PrefixMatch, explain_below
from engine.core.prefix_cache import RadixPrefixCache
from engine.core.radix import RadixCache
from engine.core.request import Request
from engine.core.tiers import DEVICE, LowerTiers, last_block_of
from engine.trace.writer import TraceSink


class TieredRadix(RadixCache):
    """The prefix tree over the tiers: an evicted block moves down, a block entering the tree leaves them."""

    def __init__(self, pool: BlockPool, trace: TraceSink, policy: str, token_text, tiers: LowerTiers):
        super().__init__(pool, trace, policy, token_text=token_text)
        self.tiers = tiers

    def _entered(self, keys) -> None:
        for key in keys:
            self.tiers.discard(key)

    def _leaving(self, node, physical: int) -> None:
        for key, event, policy in self.tiers.offload(last_block_of(node, self.block_size), physical):
            self.remember_eviction(key, event, policy)


class TieredPrefixCache(RadixPrefixCache):
    def __init__(
        self,
        pool: BlockPool,
        trace: TraceSink,
        policy: str,
        token_text,
        partial_hits: bool,
        tiers: LowerTiers,
    ):
        super().__init__(
            pool, trace, policy, token_text, partial_hits, TieredRadix(pool, trace, policy, token_text, tiers)
        )
        self.tiers = tiers

    def match(self, tokens, cache_salt, hashes=None) -> PrefixMatch:
        bs = self.block_size
        max_blocks = max(len(tokens) - 1, 0) // bs
        if hashes is None or len(hashes[0]) < max_blocks:
            hashes = block_hashes(tokens[: max_blocks * bs], bs, cache_salt)
        match = self.radix.match(tokens, cache_salt, hashes, tails_after=self.tails.after)
        match.tiers = [DEVICE] * len(match.blocks)
        match.lower = self.tiers.find(hashes[0][len(match.blocks) : max_blocks])
        if match.lower:
            match.reason, match.detail = explain_below(
                self.radix, self.tiers, match, tokens, hashes, max_blocks
            )
        return match

    def fit_loads(self, match: PrefixMatch, can_allocate, num_available) -> None:
        """Keep the lower-tier blocks of a match that device blocks can be found for, one block left over for
        the first chunk (as the manager's `can_admit` asked); the rest are computed again. `can_allocate(n)`
        and `num_available()`: the manager's figures of the pool."""
        # matched device blocks nobody holds are evictable now, not once the request shares them
        held = sum(1 for b in match.blocks if self.pool.ref_counts[b] == 0)
        if can_allocate(len(match.lower) + 1 + held):
            return
        room = max(0, num_available() - held - 1)
        if room < len(match.lower):
            match.detail = {**match.detail, "not_loaded": len(match.lower) - room}
            del match.lower[room:]

    def load_lower(self, req: Request, match: PrefixMatch, tokens: list[int], hashes, allocate_block) -> None:
        """Bring the match's lower-tier blocks into device blocks of the request (`allocate_block(request_id,
        logical)`: the manager's, which evicts when the pool is empty) and into the tree (locked)."""
        lower, match.lower = match.lower, []
        self.tiers.claim(lower)
        for block in lower:
            logical = len(req.block_table)
            physical = allocate_block(req.request_id, logical)
            self.tiers.load(block, physical, req.request_id)
            req.block_table.append(physical)
            match.blocks.append(physical)
            match.keys.append(block.key)
            match.tiers.append(block.tier)
        n = len(req.block_table)
        req.lock_node = self.insert(
            tokens[: n * self.block_size],
            req.block_table,
            req.cache_salt,
            req.request_id,
            locked=req.lock_node,
            hashes=hashes,
        )
