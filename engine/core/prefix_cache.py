"""What the KV-cache manager asks of a prefix cache, and the two it can have: the radix tree, or none.

Like mini-sglang's cache registry ("naive", "radix") behind one interface: prefix caching off is a class
(`NoPrefixCache`), not a branch in every method of the manager.

The manager (engine/core/kv_cache.py) owns the pool and decides what happens to a block whose last reference
went: the prefix cache says whether it keeps it (cached, evictable) and gives one back on demand (`evict_one`).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.core.blocks import BlockPool
from engine.core.hashing import extend_block_hashes, root_key
from engine.core.miss_explainer import PrefixMatch
from engine.core.radix import RadixCache
from engine.core.tails import TailStore
from engine.core.tree_node import Node
from engine.trace.writer import TraceSink


class PrefixCache:
    """The interface, with prefix caching off as its behaviour: nothing is ever found, kept or evicted."""

    # host (and disk) below the device (engine/core/tiered_cache.py), or None
    tiers = None

    def match(self, tokens: Sequence[int], cache_salt: str | None, hashes=None) -> PrefixMatch:
        """The longest cached whole-block prefix of `tokens` and why matching stopped."""
        return PrefixMatch.disabled(len(tokens), self.block_size)

    def partial(
        self, match: PrefixMatch, tokens: list[int], cache_salt: str | None
    ) -> tuple[int, int] | None:
        """A cached block whose first tokens continue `match`: (physical, tokens reused), or None."""
        return None

    def hashes(self, req, tokens: list[int], num_blocks: int) -> tuple[list[str], list[str]] | None:
        """The request's block hash chain grown to `num_blocks` (None: nothing here needs hashes)."""
        return None

    def acquire(self, match: PrefixMatch, request_id: str) -> Node | None:
        """Lock the matched path for a request; the lock handle (None: nothing to lock)."""
        return None

    def insert(self, tokens, blocks, cache_salt, request_id, locked=None, hashes=None) -> Node | None:
        """Put full blocks into the cache; returns the lock handle moved to the end of the path."""
        return None

    def lock(self, node: Node | None, request_id: str) -> None:
        pass

    def unlock(self, node: Node | None, request_id: str) -> None:
        pass

    def keep_tail(self, keys: list[str], cache_salt: str | None, physical: int, tokens: list[int]) -> bool:
        """Keep a partly filled last block after the whole blocks `keys` (about to be released)."""
        return False

    def holds(self, physical: int) -> bool:
        """The block is cached: its contents must not change even if one request owns it."""
        return False

    def keep_on_release(self, physical: int) -> bool:
        """The last reference to `physical` is gone: True keeps it cached (evictable)."""
        return False

    def num_cached(self) -> int:
        """Blocks nobody uses that the cache keeps."""
        return 0

    def num_evictable(self) -> int:
        return 0

    def has_evictable(self, n: int) -> bool:
        """At least n cached blocks could be evicted now (stops counting once it knows)."""
        return n <= 0

    def evict_one(self) -> int | None:
        """Reclaim one cached block (the policy's choice); None when nothing is evictable."""
        return None

    def fit_loads(self, match: PrefixMatch, can_allocate, num_available) -> None:
        """Keep the blocks a match found below the device (`match.lower`) that device blocks can be found for."""

    def load_lower(self, req, match: PrefixMatch, tokens: list[int], hashes, allocate_block) -> None:
        """Load `match.lower` into device blocks of the request (`allocate_block(request_id, logical)`)."""


class NoPrefixCache(PrefixCache):
    """Prefix caching off: every admission reports `disabled` and every released block is freed."""

    def __init__(self, block_size: int):
        self.block_size = block_size


class RadixPrefixCache(PrefixCache):
    """The prefix tree of whole blocks (engine/core/radix.py) and the tails after them (engine/core/tails.py).

    Tails go first on eviction: each costs fewer than block_size tokens to recompute.
    """

    def __init__(
        self,
        pool: BlockPool,
        trace: TraceSink,
        policy: str,
        token_text=str,
        partial_hits: bool = True,
        radix: RadixCache | None = None,
    ):
        self.block_size = pool.block_size
        # False: whole blocks only (vLLM's granularity), so no partial reuse and no tails kept
        self.partial_hits = partial_hits
        self.pool = pool
        # the tree (a subclass with tiers below it: engine/core/tiered_cache.py)
        self.radix = radix if radix is not None else RadixCache(pool, trace, policy, token_text=token_text)
        self.tails = TailStore(pool, trace, self.radix.clock)

    def match(self, tokens, cache_salt, hashes=None) -> PrefixMatch:
        return self.radix.match(tokens, cache_salt, hashes, tails_after=self.tails.after)

    def partial(self, match, tokens, cache_salt):
        """A cached block (tail or tree) whose first tokens continue the match: (physical, tokens reused).
        Never covers the last token; the manager copies the block before any write."""
        start = len(match.blocks) * self.block_size
        limit = len(tokens) - 1 - start
        # past blocks of a lower tier, whole blocks only
        if limit <= 0 or not self.partial_hits or match.lower:
            return None
        rest = list(tokens[start : start + self.block_size])
        tail = self.tails.best(match.keys[-1] if match.blocks else root_key(cache_salt), rest, limit)
        found = (tail[0].physical, tail[1]) if tail is not None else None
        whole = self.radix.next_block(match, rest, limit)
        if whole is not None and (found is None or whole[1] > found[1]):
            found = whole
        return found

    def hashes(self, req, tokens, num_blocks):
        # each block hashed once: the chain lives on the request
        extend_block_hashes(
            tokens, self.block_size, num_blocks, req.block_keys, req.block_contents, req.cache_salt
        )
        return req.block_keys, req.block_contents

    def acquire(self, match, request_id):
        return self.radix.acquire(match, request_id)

    def insert(self, tokens, blocks, cache_salt, request_id, locked=None, hashes=None):
        return self.radix.insert(tokens, blocks, cache_salt, request_id, locked=locked, hashes=hashes)

    def lock(self, node, request_id):
        if node is not None:
            self.radix.lock(node, request_id)

    def unlock(self, node, request_id):
        if node is not None:
            self.radix.unlock(node, request_id)

    def keep_tail(self, keys, cache_salt, physical, tokens) -> bool:
        if not self.partial_hits:
            return False
        if keys:
            parent = self.radix.full_path(keys)
            if parent is None:
                # its whole blocks are not all cached: nothing would ever reach the tail
                return False
            parent_key = keys[-1]
        else:
            parent_key, parent = root_key(cache_salt), self.radix.root
        return self.tails.add(parent_key, parent.node_id, physical, tokens)

    def holds(self, physical):
        return self.radix.holds(physical) or self.tails.holds(physical)

    def keep_on_release(self, physical):
        return self.radix.keep_on_release(physical) or self.tails.keep_on_release(physical)

    def num_cached(self):
        return self.radix.num_cached() + len(self.tails.evictable())

    def num_evictable(self):
        return self.radix.num_evictable() + len(self.tails.evictable())

    def has_evictable(self, n):
        n -= len(self.tails.evictable())
        return n <= 0 or self.radix.num_evictable(enough=n) >= n

    def evict_one(self):
        tail = self.tails.evict_one(self.radix.policy)
        return tail if tail is not None else self.radix.evict_one()
