"""Block keys into prefix-tree node ids, one request at a time: the same id means the same prefix.

    nodes = PrefixNodes()
    nodes.intern(["sys", "a"])     # [0, 1]
    nodes.intern(["sys", "b"])     # [0, 2]
    nodes.intern(["x", "a"])       # [3, 4]: "a" under another parent is another block

A key seen before under the same parent keeps its node (chained keys such as vLLM's block hashes or
Mooncake's hash ids: one dict lookup each); a key seen under another parent becomes another node, so
unchained keys (a per-block hash) are exact too. Incremental, so a workload can be streamed through it: the
parents live in a compact array (8 bytes a node), the only per-key cost is the dict entry.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Sequence

__all__ = ["PrefixNodes", "chain_nodes"]


class PrefixNodes:
    def __init__(self):
        self._by_key: dict = {}
        # a separate dict: a user's key may itself be a tuple that looks like (parent, key)
        self._by_pair: dict = {}
        # parent node of each node; -1 for a first block
        self.parent = array("q")

    def __len__(self) -> int:
        return len(self.parent)

    def intern(self, keys: Sequence[Hashable]) -> list[int]:
        """The node ids of one request's keys (new nodes numbered on from len(self))."""
        by_key, parent_of = self._by_key, self.parent
        nodes: list[int] = []
        parent = -1
        for key in keys:
            node = by_key.get(key)
            if node is None:
                node = len(parent_of)
                parent_of.append(parent)
                by_key[key] = node
            elif parent_of[node] != parent:
                pair = (parent, key)
                node = self._by_pair.get(pair)
                if node is None:
                    node = len(parent_of)
                    parent_of.append(parent)
                    self._by_pair[pair] = node
            nodes.append(node)
            parent = node
        return nodes


def chain_nodes(requests: Sequence[Sequence[Hashable]]) -> tuple[list[list[int]], list[int]]:
    """Every request's node ids, and the parent of each node (-1 for a first block)."""
    nodes = PrefixNodes()
    chains = [nodes.intern(keys) for keys in requests]
    return chains, list(nodes.parent)
