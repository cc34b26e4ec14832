"""Which cached block goes first when the pool runs out: the policies and what they may take.

Only the last block of an unlocked leaf whose block nobody references can go, so a parent is never evicted
before its children and a running request's path never goes. Tails (partly filled blocks, engine/tails.py)
go before any whole block: each costs fewer than block_size tokens to recompute.
    lru   least recently used first
    lfu   fewest hits first (then least recent)
    cost  cheapest to recompute first, weighted by hits: (hits + 1) x attention pairs of the block
Ties go to the deeper block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from engine.radix import Node

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


def candidates(nodes, root: Node, ref_counts: Sequence[int]) -> list[Node]:
    """Leaves whose last block could be evicted now."""
    return [node for node in nodes if node is not root and not node.children and not node.lock_ref
            and ref_counts[node.blocks[-1]] == 0]


def count_evictable(root: Node, ref_counts: Sequence[int]) -> int:
    """Tree blocks that repeated evictions would reclaim now (exact: walks the tree)."""
    total, order, stack = 0, [], [root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(node.children.values())
    cleared: dict[int, bool] = {}  # node id -> every block of its subtree would go
    for node in reversed(order):  # children before parents
        if node is root:
            continue
        count = 0
        if not node.lock_ref and all(cleared[c.node_id] for c in node.children.values()):
            for physical in reversed(node.blocks):  # only a tail of unreferenced blocks can go
                if ref_counts[physical]:
                    break
                count += 1
        total += count
        cleared[node.node_id] = count == len(node.blocks)
    return total
