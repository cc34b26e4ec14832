"""Which cached block goes first when the pool runs out: the policies and what they may take.

Only the last block of an unlocked leaf whose block nobody references can go, so a parent is never evicted
before its children and a running request's path never goes. Tails (partly filled blocks, engine/core/tails.py)
go before any whole block: each costs fewer than block_size tokens to recompute.
    lru   least recently used first
    lfu   fewest hits first (then least recent)
    cost  cheapest to recompute first, weighted by hits: (hits + 1) x attention pairs of the block
Ties go to the deeper block.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence

from engine.core.tree_node import Node

POLICIES = ("lru", "lfu", "cost")


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"unknown eviction policy {policy!r}: choose one of {', '.join(POLICIES)}")
    return policy


def recompute_cost(logical: int, block_size: int) -> float:
    """Attention (query, key) pairs to recompute block `logical`: each position p attends to p + 1 keys."""
    first = logical * block_size
    return block_size * first + block_size * (block_size + 1) / 2


def priority(node: Node, policy: str, block_size: int) -> tuple:
    """Sort key of a leaf's last block: the smallest is evicted first."""
    position = node.depth + len(node.blocks) - 1
    if policy == "lru":
        return (node.last_access, -position, node.node_id)
    if policy == "lfu":
        return (node.hit_count, node.last_access, -position, node.node_id)
    # cost: its queries attend to every earlier position, so deep blocks cost more; projections and MLP cost
    # the same everywhere
    return ((node.hit_count + 1) * recompute_cost(position, block_size), node.last_access, node.node_id)


class EvictionQueue:
    """Leaves that may be evictable, in a heap by priority: the next victim in O(log n) instead of a scan of the
    tree. Entries are checked when popped (a node may have been locked, used, grown a child or changed its
    priority since it was offered), so offering too often is harmless and offering too rarely is the only
    bug: the tree offers a node whenever it may have become a candidate (its last block cached, its lock refs
    at 0, its last child or last block evicted, a split)."""

    def __init__(self, policy: str, block_size: int):
        self.policy, self.block_size = policy, block_size
        self._heap: list[tuple] = []
        self._tick = itertools.count()

    def offer(self, node: Node) -> None:
        heapq.heappush(self._heap, (priority(node, self.policy, self.block_size), next(self._tick), node))

    def pop(
        self, is_candidate: Callable[[Node], bool], population: int, everyone: Callable[[], list[Node]]
    ) -> Node | None:
        """The candidate with the smallest priority, or None. When stale entries outnumber the tree's
        `population` of nodes four to one, the heap is rebuilt from `everyone` (amortised O(1) per offer)."""
        if len(self._heap) > 64 and len(self._heap) > 4 * population:
            self._heap = []
            for node in everyone():
                if is_candidate(node):
                    self.offer(node)
        while self._heap:
            prio, _, node = heapq.heappop(self._heap)
            if not is_candidate(node):
                continue
            current = priority(node, self.policy, self.block_size)
            # touched since it was offered: back in at its place
            if current != prio:
                heapq.heappush(self._heap, (current, next(self._tick), node))
                continue
            return node
        return None


def evict_to_free_list(pool, evict_one: Callable[[], int | None], num_blocks: int) -> list[int]:
    """Evict up to `num_blocks` cached blocks now and put them on the pool's free list (tests, CLI)."""
    evicted = []
    while len(evicted) < num_blocks and (physical := evict_one()) is not None:
        pool.free.append(physical)
        evicted.append(physical)
    return evicted


def count_evictable(root: Node, ref_counts: Sequence[int], enough: int | None = None) -> int:
    """Tree blocks that repeated evictions would reclaim now (exact: walks the tree, children before parents).
    With `enough`, the walk stops once that many are found (then the count is at least that)."""
    total = 0
    # node id -> every block of its subtree would go
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
            # only a tail of unreferenced blocks can go
            for physical in reversed(node.blocks):
                if ref_counts[physical]:
                    break
                count += 1
        total += count
        if enough is not None and total >= enough:
            return total
        cleared[node.node_id] = count == len(node.blocks)
    return total


class TreeEviction:
    """The prefix tree's (engine/core/radix.py) eviction side: keeping released blocks cached, giving back the
    policy's victim, and remembering what left (the miss explainer's `evicted`)."""

    def keep_on_release(self, physical: int) -> bool:
        node = self._node_of.get(physical)
        if node is None:
            return False
        self.trace.emit("block_cached", physical=physical, hash=node.keys[node.blocks.index(physical)])
        self._victims.offer(node)
        return True

    def num_evictable(self, enough: int | None = None) -> int:
        """Cached blocks that repeated `evict_one` calls would reclaim now (exact; with `enough`, at least
        that many where there are). A full pool asks before every new block: the count is kept until a
        reference, a lock or the tree's shape changes (an eviction takes exactly one block off it), and a
        walk asked for `enough` stops once it has found them."""
        stamp = (self.pool.changes, self.changes)
        known = self._evictable_known
        if known is not None and known[0] == stamp:
            return known[1]
        count = count_evictable(self.root, self.pool.ref_counts, enough)
        if enough is None or count < enough:
            # the walk went through the whole tree: the count is exact
            self._evictable_known = (stamp, count)
        return count

    def evict_one(self) -> int | None:
        """Reclaim the policy's choice among the last blocks of unlocked leaves; the pool frees it."""
        victim = self._victims.pop(self._evictable, len(self.nodes), lambda: list(self.nodes.values()))
        return None if victim is None else self._evict_last_block(victim)

    def _evictable(self, node: Node) -> bool:
        return (
            self.nodes.get(node.node_id) is node
            and node is not self.root
            and not node.children
            and not node.lock_ref
            and bool(node.blocks)
            and self.pool.ref_counts[node.blocks[-1]] == 0
        )

    def evict(self, num_blocks: int) -> list[int]:
        """Evict up to `num_blocks` cached blocks now and put them on the pool's free list (tests, CLI)."""
        return evict_to_free_list(self.pool, self.evict_one, num_blocks)

    def remember_eviction(self, key: str, event: dict, policy: str) -> None:
        """A block left the cache (the device, or the last tier below it): its event and policy, for `evicted`."""
        self.evicted[key] = (event["seq"], event["t"], policy)
        self.evicted.move_to_end(key)
        while len(self.evicted) > self._evicted_memory:
            self.evicted.popitem(last=False)

    def _leaving(self, node: Node, physical: int) -> None:
        """The last block of `node` (device block `physical`) is evicted, its event out, the node unchanged
        yet (a tier below keeps a copy)."""

    def _evict_last_block(self, node: Node) -> int:
        physical, key = node.blocks[-1], node.keys[-1]
        known = self._evictable_known
        if known is not None and known[0] == (self.pool.changes, self.changes):
            # the victim was one of the blocks counted, and the rest stay reclaimable
            self._evictable_known = (known[0], known[1] - 1)
        event = self.trace.emit(
            "block_evicted", physical=physical, hash=key, policy=self.policy, node_id=node.node_id
        )
        self.remember_eviction(key, event, self.policy)
        self._leaving(node, physical)
        salts = self.salts_of[node.contents[-1]]
        salts[node.cache_salt] -= 1
        if not salts[node.cache_salt]:
            del salts[node.cache_salt]
            if not salts:
                del self.salts_of[node.contents[-1]]
        del self._node_of[physical]
        first_key = node.keys[0]
        del node.blocks[-1], node.keys[-1], node.contents[-1], node.token_ids[-self.block_size :]
        if not node.blocks:
            del node.parent.children[first_key]
            del self.nodes[node.node_id]
            self.trace.emit("radix_evict", node_id=node.node_id)
            # it may be a leaf now
            self._victims.offer(node.parent)
        else:
            # its new last block
            self._victims.offer(node)
        return physical
