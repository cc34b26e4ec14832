"""The prefix tree: a radix tree over token ids at block granularity, on top of the block pool.

Regions of a request's sequence, named once and used everywhere:
    [ cached prefix | computed | to compute ]
    cached prefix: whole blocks found in the tree at admission (`match`), shared, never recomputed;
    computed:      K/V this request wrote itself; its full blocks go into the tree (`insert`) as they fill;
    to compute:    the rest. The last prompt token is always computed (its logits pick the first output token),
                   so a match never covers it: at most floor((prompt_len - 1) / block_size) blocks.

Tree: every node holds a run of whole blocks (their physical ids, token ids and chained hashes, engine/core/hashing.py);
a child starts where its parent's run ends. One key names a whole prefix, and different cache salts give
different keys from block 0 on, so tenants live in separate subtrees.

Ownership: the pool's ref counts say who uses a block; the tree never holds a reference. A tree block whose
ref count drops to 0 stays in the tree as *cached* (`keep_on_release`) until evicted (engine/core/eviction.py).
Running requests hold a lock ref on their path (walking up to the root, as SGLang does).

Duplicates: if a request computed a block that the tree already holds under the same key (two requests with
the same prompt admitted together), `insert` keeps the tree's block and leaves the request's own copy out of
the tree; that copy is freed normally when the request releases it. The tree never holds two copies.

Writes: a block in the tree must never be written again. Only full blocks enter the tree and a request only
writes its last, partial block, so the one case is an edit that keeps the valid part of a tree block: copy it
first even when its ref count is 1 (`holds(physical)` tells).
"""

from __future__ import annotations

import itertools
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence

from engine.core import eviction
from engine.core.blocks import BlockPool
from engine.core.hashing import block_hashes, root_key
from engine.core.miss_explainer import PrefixMatch, common_prefix, explain
from engine.core.tree_node import Node
from engine.trace import TraceSink


class RadixCache(eviction.TreeEviction):
    """Prefix tree + eviction policy over the pool's blocks (engine/core/prefix_cache.py puts it behind the
    manager's PrefixCache interface; its eviction side is engine/core/eviction.py's TreeEviction)."""

    def __init__(
        self,
        pool: BlockPool,
        trace: TraceSink,
        policy: str = "lru",
        clock: Callable[[], float] | None = None,
        token_text: Callable[[int], str] | None = str,
        evicted_memory: int = 4096,
    ):
        self.pool, self.trace, self.policy = pool, trace, eviction.check_policy(policy)
        self.block_size = pool.block_size
        # A logical counter by default: access order alone decides LRU, and runs are reproducible.
        self.clock = clock or itertools.count(1).__next__
        self.token_text = token_text
        self.root = Node(0, None, None, 0)
        self.nodes: dict[int, Node] = {0: self.root}
        self._ids = itertools.count(1)
        # physical block -> the node holding it
        self._node_of: dict[int, Node] = {}
        # content hash -> cache salts holding it (miss explainer)
        self.salts_of: dict[str, Counter] = {}
        # Keys of evicted blocks -> (seq and t of the block_evicted event, policy); bounded, oldest dropped.
        self.evicted: OrderedDict[str, tuple[int, float, str]] = OrderedDict()
        self._evicted_memory = evicted_memory
        self._victims = eviction.EvictionQueue(self.policy, self.block_size)
        # bumped by every change of shape or lock (eviction.py keeps its evictable count until it changes)
        self.changes = 0
        self._evictable_known: tuple | None = None

    # --- queries ------------------------------------------------------------------------------------------
    def holds(self, physical: int) -> bool:
        """Is the block in the tree? Then its contents are shared with the cache: copy before writing."""
        return physical in self._node_of

    def num_cached(self) -> int:
        return sum(1 for b in self._node_of if self.pool.ref_counts[b] == 0)

    def match(
        self,
        token_ids: Sequence[int],
        cache_salt: str | None = None,
        hashes: tuple[list[str], list[str]] | None = None,
        tails_after=None,
    ) -> PrefixMatch:
        """Longest cached prefix of whole blocks, never covering the last token. Changes nothing. `hashes`: the
        sequence's (keys, contents), when the caller already has them for every matchable block. `tails_after`:
        key of a whole block (or the root's) -> the cached partly filled blocks after it, for the explainer."""
        bs, n_prompt = self.block_size, len(token_ids)
        max_blocks = max(n_prompt - 1, 0) // bs
        result = PrefixMatch([], "", {}, n_prompt, bs, cache_salt)
        if max_blocks == 0:
            result.reason, result.detail = "short_prompt", {"prompt_tokens": n_prompt, "block_size": bs}
            return result
        if hashes is not None and len(hashes[0]) >= max_blocks:
            keys, contents = hashes[0][:max_blocks], hashes[1][:max_blocks]
        else:
            keys, contents = block_hashes(token_ids[: max_blocks * bs], bs, cache_salt)
        path = self.walk(keys)
        result.nodes = [node for node, _ in path]
        result.blocks = [b for node, used in path for b in node.blocks[:used]]
        result.keys = keys[: len(result.blocks)]
        tails = ()
        if tails_after is not None:
            tails = tails_after(result.keys[-1] if result.blocks else root_key(cache_salt))
        result.reason, result.detail = explain(
            self, token_ids, keys, contents, path, max_blocks, cache_salt, tails
        )
        return result

    def walk(self, keys: Sequence[str]) -> list[tuple[Node, int]]:
        """Follow `keys` from the root: the path as (node, blocks of it matched); the last may be partial."""
        node, i, path = self.root, 0, []
        while i < len(keys) and (child := node.children.get(keys[i])) is not None:
            used = 1
            while used < len(child.keys) and i + used < len(keys) and child.keys[used] == keys[i + used]:
                used += 1
            path.append((child, used))
            i += used
            if used < len(child.keys):
                break
            node = child
        return path

    def next_block(self, match: PrefixMatch, rest: Sequence[int], limit: int) -> tuple[int, int] | None:
        """A whole tree block after the match whose first tokens equal `rest`: (physical, tokens, <= limit)."""
        bs = self.block_size
        path = self.walk(match.keys) if match.blocks else []
        if path and path[-1][1] < len(path[-1][0].blocks):
            node, used = path[-1]
            nexts = [(node.blocks[used], node.token_ids[used * bs : (used + 1) * bs])]
        else:
            node = path[-1][0] if path else self.root
            nexts = [
                (c.blocks[0], c.token_ids[:bs])
                for c in node.children.values()
                if c.cache_salt == match.cache_salt
            ]
        found = None
        for physical, tokens in nexts:
            same = min(common_prefix(tokens, rest), limit)
            if same > 0 and (found is None or same > found[1]):
                found = (physical, same)
        return found

    def full_path(self, keys: Sequence[str]) -> Node | None:
        """The node holding the last of the blocks `keys` names when every one of them is in the tree, else None."""
        path = self.walk(keys)
        return path[-1][0] if path and sum(used for _, used in path) == len(keys) else None

    # --- admission, growth, locks -------------------------------------------------------------------------
    def acquire(self, match: PrefixMatch, request_id: str) -> Node:
        """Commit a match the request is about to use: split the tree at its end, count the hit, lock the path.

        Call it right after `match` and `pool.share` of `match.blocks`, before allocating anything (an
        allocation may evict). Returns the request's lock handle (the root when nothing matched).
        """
        if not match.blocks:
            return self.root
        path = self.walk(match.keys)
        if [b for node, used in path for b in node.blocks[:used]] != match.blocks:
            raise RuntimeError(
                "the prefix tree changed between match() and acquire(): call acquire right after "
                "match, before anything allocates or evicts"
            )
        node, used = path[-1]
        if used < len(node.blocks):
            path[-1] = (self._split(node, used), used)
        now = self.clock()
        for node, used in path:
            node.hit_count += 1
            node.last_access = now
            self.trace.emit("radix_hit", node_id=node.node_id, request_id=request_id, blocks=used)
        self.lock(path[-1][0], request_id)
        return path[-1][0]

    def insert(
        self,
        token_ids: Sequence[int],
        blocks: Sequence[int],
        cache_salt: str | None = None,
        request_id: str | None = None,
        texts: Sequence[str] | None = None,
        locked: Node | None = None,
        hashes: tuple[list[str], list[str]] | None = None,
    ) -> Node:
        """Put the full blocks of a sequence (its token ids and block table) into the tree; idempotent.

        Returns the node that ends the sequence's path of full blocks. With `locked` (the request's current
        handle) the lock moves from it to the returned node, which becomes the new handle. `hashes`: the
        sequence's (keys, contents) already computed (at least n blocks); texts are decoded for new nodes only.
        """
        bs = self.block_size
        n = min(len(token_ids) // bs, len(blocks))
        if hashes is not None and len(hashes[0]) >= n:
            keys, contents = hashes[0][:n], hashes[1][:n]
        else:
            keys, contents = block_hashes(token_ids[: n * bs], bs, cache_salt)
        now = self.clock()
        node, i = self.root, 0
        while i < n:
            child = node.children.get(keys[i])
            if child is None:
                node = self._add_node(
                    node, keys[i:n], contents[i:n], blocks[i:n], token_ids, texts, i, cache_salt, request_id
                )
                node.last_access = now
                break
            used = 1
            while used < len(child.keys) and i + used < n and child.keys[used] == keys[i + used]:
                used += 1
            if used < len(child.keys):
                child = self._split(child, used)
            child.last_access = now
            node, i = child, i + used
        if locked is not None:
            # lock the new path first so nothing on it is ever unlocked in between
            self.lock(node, request_id)
            self.unlock(locked, request_id)
        return node

    def lock(self, node: Node, request_id: str | None = None) -> None:
        """A running request uses the path from the root to `node`: none of it may be evicted (event radix_lock:
        every node on the path gains one lock ref)."""
        if node is self.root:
            return
        handle = node
        self.changes += 1
        while node is not self.root:
            node.lock_ref += 1
            node = node.parent
        self.trace.emit("radix_lock", node_id=handle.node_id, request_id=request_id, lock_ref=handle.lock_ref)

    def unlock(self, node: Node, request_id: str | None = None) -> None:
        if node is self.root:
            return
        handle = node
        self.changes += 1
        while node is not self.root:
            if node.lock_ref <= 0:
                raise RuntimeError(f"radix node {node.node_id} unlocked more often than locked")
            node.lock_ref -= 1
            if not node.lock_ref:
                self._victims.offer(node)
            node = node.parent
        self.trace.emit(
            "radix_unlock", node_id=handle.node_id, request_id=request_id, lock_ref=handle.lock_ref
        )

    def _add_node(
        self, parent, keys, contents, blocks, token_ids, texts, first, cache_salt, request_id
    ) -> Node:
        bs = self.block_size
        self.changes += 1
        for physical in blocks:
            if physical in self._node_of:
                raise RuntimeError(
                    f"block {physical} is already in the prefix tree under another prefix: "
                    "a cached block was written without copy-on-write"
                )
            if self.pool.ref_counts[physical] == 0:
                raise RuntimeError(
                    f"block {physical} has no owner: insert a request's blocks before releasing them"
                )
        node = Node(
            next(self._ids),
            parent,
            cache_salt,
            parent.depth + len(parent.blocks),
            list(keys),
            list(contents),
            list(blocks),
            list(token_ids[first * bs : (first + len(blocks)) * bs]),
        )
        parent.children[keys[0]] = node
        self.nodes[node.node_id] = node
        for physical, key, content in zip(blocks, keys, contents):
            self._node_of[physical] = node
            self.salts_of.setdefault(content, Counter())[cache_salt] += 1
            self.evicted.pop(key, None)
        self._entered(keys)
        if texts is not None:
            token_texts = list(texts[first * bs : (first + len(blocks)) * bs])
        elif self.token_text is None:
            # nobody reads texts (a what-if run that writes no trace)
            token_texts = None
        else:
            token_texts = [self.token_text(t) for t in node.token_ids]
        self.trace.emit(
            "radix_insert",
            node_id=node.node_id,
            parent_id=parent.node_id,
            blocks=list(blocks),
            token_ids=list(node.token_ids),
            texts=token_texts,
            request_id=request_id,
            hashes=list(keys),
        )
        return node

    def _entered(self, keys: Sequence[str]) -> None:
        """Blocks of these keys entered the tree (a tier below, engine/core/tiered_cache.py, drops its copy)."""

    def _split(self, node: Node, at: int) -> Node:
        """Cut `node` after `at` blocks. The prefix takes the node's id and place (as radix_split says); the
        node object keeps the suffix under a new id, so a request holding it as its handle still unlocks both."""
        bs = self.block_size
        prefix = Node(
            node.node_id,
            node.parent,
            node.cache_salt,
            node.depth,
            node.keys[:at],
            node.contents[:at],
            node.blocks[:at],
            node.token_ids[: at * bs],
            {node.keys[at]: node},
            node.lock_ref,
            node.last_access,
            node.hit_count,
        )
        node.parent.children[node.keys[0]] = prefix
        node.node_id = next(self._ids)
        node.parent, node.depth = prefix, node.depth + at
        del node.keys[:at], node.contents[:at], node.blocks[:at], node.token_ids[: at * bs]
        self.nodes[prefix.node_id] = prefix
        self.nodes[node.node_id] = node
        for physical in prefix.blocks:
            self._node_of[physical] = prefix
        # the suffix sits deeper now: its priority moved
        self._victims.offer(node)
        self.trace.emit("radix_split", node_id=prefix.node_id, new_node_id=node.node_id, at=at)
        return prefix
