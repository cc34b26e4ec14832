"""A node of the prefix tree (engine/core/radix.py): a run of whole blocks, its hashes, tokens, locks and use.

Its own module so that the eviction policies and the miss explainer can name it without importing the tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class Node:
    node_id: int
    parent: Node | None
    cache_salt: str | None
    # blocks before this node on its path: the logical index of its first block
    depth: int
    keys: list[str] = field(default_factory=list)
    contents: list[str] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    # first key of the child -> child
    children: dict[str, Node] = field(default_factory=dict)
    lock_ref: int = 0
    last_access: float = 0.0
    hit_count: int = 0

    def __repr__(self) -> str:
        return f"Node({self.node_id}, blocks={self.blocks}, lock_ref={self.lock_ref})"
