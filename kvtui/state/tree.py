"""The radix tree reducer: the prefix tree's nodes (runs of whole blocks and their tokens), their hits and the
lock refs requests hold on them (radix_lock / radix_unlock, exactly as the engine counts them), and the recent
evictions.

Nodes are copied on write, like requests: `_node` copies one the first time this state mutates it. The root
is node 0 and holds no blocks.
"""

from __future__ import annotations

import copy as _copy
from dataclasses import dataclass, field


@dataclass(slots=True)
class RadixNode:
    """A node of the prefix tree: a run of whole blocks and their tokens."""

    node_id: int
    parent_id: int
    blocks: list[int]
    token_ids: list[int]
    texts: list[str]
    children: list[int] = field(default_factory=list)
    hits: int = 0
    # one entry per lock ref: the requests whose path holds it
    lockers: list[str] = field(default_factory=list)
    created: float = 0.0
    last_access: float = 0.0
    # the last thing that happened to it: insert | hit | split
    mark: str = ""
    mark_seq: int = -1
    owner: int = 0

    def copy(self) -> RadixNode:
        new = _copy.copy(self)
        new.blocks = list(self.blocks)
        new.token_ids = list(self.token_ids)
        new.texts = list(self.texts)
        new.children = list(self.children)
        new.lockers = list(self.lockers)
        return new


@dataclass(frozen=True, slots=True)
class KeptBlock:
    """A block of a sequence the cache keeps with no request holding it: a tree block or a tail."""

    physical: int
    # the radix node holding it; None for a tail (a partly filled last block)
    node_id: int | None
    # how many of the sequence's tokens it holds
    tokens: int


class TreeReducer:
    """The radix tree part of `CacheState`: radix_* events, lock refs, and the tree's derived views."""

    def _init_tree(self) -> None:
        self.nodes: dict[int, RadixNode] = {0: RadixNode(0, -1, [], [], [], owner=self._gen)}
        # (node_id, t, text) recent evictions
        self.evicted_nodes: list[tuple[int, float, str]] = []

    def _snapshot_tree(self, new) -> None:
        new.nodes = dict(self.nodes)
        new.evicted_nodes = list(self.evicted_nodes)

    def _node(self, node_id: int) -> RadixNode | None:
        """The node, owned by this state (copied first if a snapshot shares it)."""
        node = self.nodes.get(node_id)
        if node is not None and node.owner != self._gen:
            node = self.nodes[node_id] = node.copy()
            node.owner = self._gen
        return node

    # ------------------------------------------------------------------ derived views
    def radix_rows(self) -> list[tuple[int, int]]:
        """The tree flattened depth-first: (depth, node_id) for every node under the root."""
        rows: list[tuple[int, int]] = []
        stack = [(0, child) for child in reversed(self.nodes[0].children)]
        nodes = self.nodes
        while stack:
            depth, node_id = stack.pop()
            node = nodes.get(node_id)
            if node is None:
                continue
            rows.append((depth, node_id))
            stack.extend((depth + 1, child) for child in reversed(node.children))
        return rows

    def cached_path(self, token_ids: list[int]) -> list[tuple[int, int]]:
        """(node_id, physical) of each whole block of `token_ids` the prefix tree still holds, from position 0.

        What a request left behind once it finished: the probe match its next turn or edit would get.
        """
        bs = self.block_size
        out: list[tuple[int, int]] = []
        node, pos = self.nodes[0], 0
        while True:
            nxt = None
            for child_id in node.children:
                child = self.nodes.get(child_id)
                if (
                    child is not None
                    and child.token_ids[:bs] == token_ids[pos : pos + bs]
                    and len(child.token_ids) >= bs
                ):
                    nxt = child
                    break
            if nxt is None:
                return out
            for i, p in enumerate(nxt.blocks):
                lo = i * bs
                if len(token_ids) < pos + bs or nxt.token_ids[lo : lo + bs] != token_ids[pos : pos + bs]:
                    return out
                out.append((nxt.node_id, p))
                pos += bs
            node = nxt

    def kept_blocks(self, token_ids: list[int], cache_salt: str | None) -> list[KeptBlock]:
        """The tree's whole blocks of `token_ids` from position 0 (`cached_path`), then the tail after them that
        shares the most leading tokens with the rest, as the engine's partial match picks it."""
        bs = self.block_size
        kept = [KeptBlock(p, node_id, bs) for node_id, p in self.cached_path(token_ids)]
        pos = len(kept) * bs
        parent = kept[-1].physical if kept else -1
        rest = token_ids[pos : pos + bs]
        best = None
        for p, tail in self.tails.items():
            if tail.logical * bs != pos or tail.parent != parent or tail.cache_salt != cache_salt:
                continue
            same = _common_prefix(tail.token_ids, rest)
            if same and (best is None or same > best.tokens):
                best = KeptBlock(p, None, same)
        return kept + [best] if best is not None else kept

    # ------------------------------------------------------------------ lock refs
    def _on_radix_lock(self, ev: dict) -> None:
        """A request uses the path from the root to `node_id`: every node on it gains one lock ref."""
        rid, node_id = ev.get("request_id") or "?", ev["node_id"]
        walk = node_id
        # the root (0) holds no blocks and no locks
        while walk:
            node = self._node(walk)
            if node is None:
                break
            node.lockers.append(rid)
            walk = node.parent_id
        req = self._req(rid)
        if req is not None:
            req.locked.append(node_id)

    def _on_radix_unlock(self, ev: dict) -> None:
        rid, node_id = ev.get("request_id") or "?", ev["node_id"]
        walk = node_id
        while walk:
            node = self._node(walk)
            if node is None:
                break
            if rid in node.lockers:
                node.lockers.remove(rid)
            walk = node.parent_id
        req = self._req(rid)
        if req is not None and node_id in req.locked:
            req.locked.remove(node_id)

    # ------------------------------------------------------------------ events
    def _trim_node(self, node_id: int, p: int, seq: int) -> None:
        """Block `p` was evicted. Eviction takes one block at a time from the end of a leaf: the node shrinks by
        that block (and all after it); `radix_evict` follows only when the node is empty."""
        node = self.nodes.get(node_id)
        if node is not None and p in node.blocks:
            node = self._node(node_id)
            i = node.blocks.index(p)
            for q in node.blocks[i + 1 :]:
                self.block_node.pop(q, None)
            cut = i * self.block_size
            node.blocks, node.token_ids, node.texts = node.blocks[:i], node.token_ids[:cut], node.texts[:cut]
            node.mark, node.mark_seq = "evict", seq

    def _on_radix_insert(self, ev: dict) -> None:
        node_id, parent_id = ev["node_id"], ev["parent_id"]
        t = ev["t"]
        self.nodes[node_id] = RadixNode(
            node_id,
            parent_id,
            list(ev["blocks"]),
            list(ev["token_ids"]),
            list(ev["texts"]),
            created=t,
            last_access=t,
            mark="insert",
            mark_seq=ev["seq"],
            owner=self._gen,
        )
        parent = self._node(parent_id)
        if parent is not None:
            parent.children.append(node_id)
        for p in ev["blocks"]:
            self.block_node[p] = node_id
        for p, key in zip(ev["blocks"], ev.get("hashes") or ()):
            self.block_hash[p] = key

    def _on_radix_split(self, ev: dict) -> None:
        node = self._node(ev["node_id"])
        if node is None:
            return
        at, new_id = ev["at"], ev["new_node_id"]
        cut = at * self.block_size
        child = RadixNode(
            new_id,
            node.node_id,
            node.blocks[at:],
            node.token_ids[cut:],
            node.texts[cut:],
            children=node.children,
            hits=node.hits,
            lockers=list(node.lockers),
            created=ev["t"],
            last_access=node.last_access,
            mark="split",
            mark_seq=ev["seq"],
            owner=self._gen,
        )
        self.nodes[new_id] = child
        for grandchild_id in child.children:
            grandchild = self._node(grandchild_id)
            if grandchild is not None:
                grandchild.parent_id = new_id
        for p in child.blocks:
            self.block_node[p] = new_id
        # a request whose handle was this node now holds the suffix (engine/core/radix.py)
        for rid in set(child.lockers):
            req = self.requests.get(rid)
            if req is not None and node.node_id in req.locked:
                req = self._req(rid)
                req.locked = [new_id if n == node.node_id else n for n in req.locked]
        node.blocks, node.token_ids, node.texts = node.blocks[:at], node.token_ids[:cut], node.texts[:cut]
        node.children = [new_id]
        node.mark, node.mark_seq = "split", ev["seq"]

    def _on_radix_evict(self, ev: dict) -> None:
        node_id = ev["node_id"]
        node = self.nodes.get(node_id)
        if node is None:
            return
        parent = self._node(node.parent_id)
        if parent is not None and node_id in parent.children:
            parent.children.remove(node_id)
        # should not happen (only leaves are evicted); keep them reachable
        for child_id in node.children:
            child = self._node(child_id)
            if child is not None and parent is not None:
                child.parent_id = parent.node_id
                parent.children.append(child_id)
        del self.nodes[node_id]
        self.evicted_nodes.append((node_id, ev["t"], "".join(node.texts)[:40]))
        if len(self.evicted_nodes) > 32:
            del self.evicted_nodes[0]

    def _on_radix_hit(self, ev: dict) -> None:
        node = self._node(ev["node_id"])
        if node is None:
            return
        node.hits += 1
        node.last_access = ev["t"]
        node.mark, node.mark_seq = "hit", ev["seq"]


def _common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
