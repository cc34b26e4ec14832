"""The engine's KVCacheManager as the what-if runs use it: the same decisions, two differences stated here.

`SimCacheManager.can_allocate` gives the engine's answer (n blocks are free or can be made free by eviction)
without counting every evictable block of the tree: the engine's `num_available()` walks the whole tree
(eviction.count_evictable) each time the free list is short, which on a full pool is every new block and a
third of a production-size run. Here the same post-order walk stops as soon as n is reached. Same boolean,
same decisions (tests/kvtui/whatif/test_simulate.py runs both and compares every figure).

`PromptOnlyCacheManager` is for hash-id workloads (Mooncake): generated tokens take pool space while their
request runs but never enter the prefix cache (`cache_blocks` and `free` see the request as computed up to
its prompt at most), since their content is unknown and the next turn's hash ids already carry it.
"""

from __future__ import annotations

from engine.core.kv_cache import KVCacheManager
from engine.core.request import Request


class SimCacheManager(KVCacheManager):
    def can_allocate(self, n: int) -> bool:
        free = self.pool.num_free()
        if n <= free:
            return True
        radix = getattr(self.prefix_cache, "radix", None)
        if radix is None:
            return n <= free + self.prefix_cache.num_evictable()
        have = free + len(self.prefix_cache.tails.evictable())
        return have >= n or _evictable_at_least(radix.root, self.pool.ref_counts, n - have)


def _evictable_at_least(root, ref_counts, need: int) -> bool:
    """eviction.count_evictable(root, ref_counts) >= need, stopping the walk once it is (children first)."""
    have = 0
    cleared: dict[int, bool] = {}
    stack = [(root, iter(root.children.values()))]
    while stack:
        node, children = stack[-1]
        child = next(children, None)
        if child is not None:
            stack.append((child, iter(child.children.values())))
            continue
        stack.pop()
        if node is root:
            break
        count = 0
        if not node.lock_ref and all(cleared[c.node_id] for c in node.children.values()):
            for physical in reversed(node.blocks):
                if ref_counts[physical]:
                    break
                count += 1
        have += count
        if have >= need:
            return True
        cleared[node.node_id] = count == len(node.blocks)
    return False


class PromptOnlyCacheManager(SimCacheManager):
    def cache_blocks(self, req: Request) -> None:
        computed, prompt = req.num_computed, len(req.prompt_token_ids)
        if computed <= prompt:
            return super().cache_blocks(req)
        if req.blocks_in_tree >= min(prompt // self.block_size, len(req.block_table)):
            # decoding: every full prompt block is in the tree already
            return None
        req.num_computed = prompt
        try:
            super().cache_blocks(req)
        finally:
            req.num_computed = computed

    def free(self, req: Request) -> None:
        computed, prompt = req.num_computed, len(req.prompt_token_ids)
        if computed > prompt:
            req.num_computed = prompt
        try:
            super().free(req)
        finally:
            req.num_computed = computed
