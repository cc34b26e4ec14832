"""The prefix cache: a radix tree over token ids at block granularity, on top of the block pool.

Regions of a request's sequence, named once and used everywhere:
    [ cached prefix | computed | to compute ]
    cached prefix: whole blocks found in the tree at admission (`match`), shared, never recomputed;
    computed:      K/V this request wrote itself; its full blocks go into the tree (`insert`) as they fill;
    to compute:    the rest. The last prompt token is always computed (its logits pick the first output token),
                   so a match never covers it: at most floor((prompt_len - 1) / block_size) blocks.

Tree: every node holds a run of whole blocks (their physical ids, token ids and hashes); a child starts where
its parent's run ends. Each block is keyed by a chained hash, so one key names a whole prefix:
    content_i = sha256(content_{i-1}, token ids of block i)   (block 0 chains on a root that names the adapter)
    key_i     = content_i with no cache salt, else sha256(salt, content_i)
Different salts give different keys from block 0 on, so tenants live in separate subtrees and never share a
block. The salt-free `content` hashes let the miss explainer say "another salt holds this prefix".

Ownership: the pool's ref counts say who uses a block; the tree never holds a reference. A tree block whose
ref count drops to 0 stays in the tree as *cached* (`keep_on_release`) until evicted. Running requests hold a
lock ref on their path (walking up to the root, as SGLang does); eviction takes the last block of an
unlocked leaf whose block nobody references, so a parent is never evicted before its children.

Duplicates: if a request computed a block that the tree already holds under the same key (two requests with
the same prompt admitted together), `insert` keeps the tree's block and leaves the request's own copy out of
the tree; that copy is freed normally when the request releases it. The tree never holds two copies.

Writes: a block in the tree must never be written again. Only full blocks enter the tree and a request only
writes its last, partial block, so the one case is an edit that keeps the valid part of a tree block: copy it
first even when its ref count is 1 (`holds(physical)` tells).
"""

from __future__ import annotations

import hashlib
import itertools
import struct
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Sequence

from engine.blocks import BlockPool
from engine.tails import TailStore, common_prefix, root_key
from engine.trace import TraceSink

POLICIES = ("lru", "lfu", "cost")
HASH_HEX_CHARS = 16  # 64 bits: ample for one cache, and short in the trace


# --- hashing ----------------------------------------------------------------------------------------------
def root_hash(adapter_id: str | None = None) -> str:
    """Parent of block 0: names the weights (a LoRA adapter) whose K/V the chain describes."""
    return hashlib.sha256(f"kvtui-block-v1|adapter={adapter_id or ''}".encode()).hexdigest()[:HASH_HEX_CHARS]


def chain_hash(parent: str, token_ids: Sequence[int]) -> str:
    """Content hash of one block: its parent's hash and its token ids (little-endian int64, stable anywhere)."""
    data = parent.encode() + b"|" + struct.pack(f"<{len(token_ids)}q", *token_ids)
    return hashlib.sha256(data).hexdigest()[:HASH_HEX_CHARS]


def salted(content: str, cache_salt: str | None) -> str:
    if cache_salt is None:
        return content
    return hashlib.sha256(f"salt={cache_salt}|{content}".encode()).hexdigest()[:HASH_HEX_CHARS]


def block_hashes(token_ids: Sequence[int], block_size: int, cache_salt: str | None = None,
                 adapter_id: str | None = None) -> tuple[list[str], list[str]]:
    """(keys, contents) of every full block of `token_ids`."""
    keys, contents = [], []
    parent = root_hash(adapter_id)
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = chain_hash(parent, token_ids[start:start + block_size])
        contents.append(parent)
        keys.append(salted(parent, cache_salt))
    return keys, contents


# --- tree and match result --------------------------------------------------------------------------------
@dataclass(eq=False)
class Node:
    node_id: int
    parent: Node | None
    cache_salt: str | None
    depth: int  # blocks before this node on its path: the logical index of its first block
    keys: list[str] = field(default_factory=list)
    contents: list[str] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    children: dict[str, Node] = field(default_factory=dict)  # first key of the child -> child
    lock_ref: int = 0
    last_access: float = 0.0
    hit_count: int = 0

    def __repr__(self) -> str:
        return f"Node({self.node_id}, blocks={self.blocks}, lock_ref={self.lock_ref})"


@dataclass
class PrefixMatch:
    """The longest cached whole-block prefix of a prompt, and why matching stopped (the miss explainer)."""

    blocks: list[int]  # physical ids of the cached prefix, logical order
    reason: str  # divergent | block_floor | evicted | salt | short_prompt | disabled | full_match |
    #              empty_cache | cache_end
    detail: dict
    prompt_tokens: int
    block_size: int
    cache_salt: str | None = None
    nodes: list[Node] = field(default_factory=list)  # the path (the last one may be covered only in part)
    keys: list[str] = field(default_factory=list)  # keys of the matched blocks
    partial_tokens: int = 0  # leading tokens of one more block reused too (a cached tail or tree block)

    @property
    def num_tokens(self) -> int:
        return len(self.blocks) * self.block_size + self.partial_tokens

    @property
    def matchable_tokens(self) -> int:
        """Prompt tokens that could match: all but the last, which is always computed."""
        return max(self.prompt_tokens - 1, 0)

    @property
    def block_lookups(self) -> int:
        return self.matchable_tokens // self.block_size

    @classmethod
    def disabled(cls, prompt_tokens: int, block_size: int) -> PrefixMatch:
        """What the engine reports with the prefix cache off (no RadixCache exists)."""
        return cls([], "disabled", {}, prompt_tokens, block_size)

    def event_fields(self, request_id: str, text: Callable[[int], str] | None = None) -> dict:
        """Fields of the `prefix_match` event; `text` decodes the expected/actual token ids of a divergence."""
        detail = dict(self.detail)
        for side in ("expected", "actual"):
            token = detail.get(f"{side}_id")
            if token is not None:
                detail[f"{side}_text"] = text(token) if text else str(token)
        return {"request_id": request_id, "prompt_tokens": self.prompt_tokens, "matched_tokens": self.num_tokens,
                "reason": self.reason, "detail": detail}


# --- the cache --------------------------------------------------------------------------------------------
class RadixCache:
    """Prefix tree + eviction policy; installs itself as `pool.cache` (the BlockCache of engine.blocks)."""

    def __init__(self, pool: BlockPool, trace: TraceSink, policy: str = "lru",
                 clock: Callable[[], float] | None = None, token_text: Callable[[int], str] = str,
                 evicted_memory: int = 4096):
        if policy not in POLICIES:
            raise ValueError(f"unknown eviction policy {policy!r}: choose one of {', '.join(POLICIES)}")
        self.pool, self.trace, self.policy = pool, trace, policy
        self.block_size = pool.block_size
        # A logical counter by default: access order alone decides LRU, and runs are reproducible.
        self.clock = clock or itertools.count(1).__next__
        self.token_text = token_text
        self.root = Node(0, None, None, 0)
        self.nodes: dict[int, Node] = {0: self.root}
        self._ids = itertools.count(1)
        self._node_of: dict[int, Node] = {}  # physical block -> the node holding it
        self._salts_of: dict[str, Counter] = {}  # content hash -> cache salts holding it (miss explainer)
        # Keys of evicted blocks -> (seq and t of the block_evicted event, policy); bounded, oldest dropped.
        self._evicted: OrderedDict[str, tuple[int, float, str]] = OrderedDict()
        self._evicted_memory = evicted_memory
        self.tails = TailStore(pool, trace, self.clock)  # partly filled last blocks (engine/tails.py)
        pool.cache = self

    # --- queries ------------------------------------------------------------------------------------------
    def holds(self, physical: int) -> bool:
        """Is the block cached (tree or tail)? Then its contents are shared with the cache: copy before writing."""
        return physical in self._node_of or self.tails.holds(physical)

    def num_cached(self) -> int:
        return sum(1 for b in self._node_of if self.pool.ref_counts[b] == 0) + len(self.tails.evictable())

    def match(self, token_ids: Sequence[int], cache_salt: str | None = None) -> PrefixMatch:
        """Longest cached prefix of whole blocks, never covering the last token. Changes nothing."""
        bs, n_prompt = self.block_size, len(token_ids)
        max_blocks = max(n_prompt - 1, 0) // bs
        result = PrefixMatch([], "", {}, n_prompt, bs, cache_salt)
        if max_blocks == 0:
            result.reason, result.detail = "short_prompt", {"prompt_tokens": n_prompt, "block_size": bs}
            return result
        keys, contents = block_hashes(token_ids[:max_blocks * bs], bs, cache_salt)
        path = self._walk(keys)
        result.nodes = [node for node, _ in path]
        result.blocks = [b for node, used in path for b in node.blocks[:used]]
        result.keys = keys[:len(result.blocks)]
        result.reason, result.detail = self._explain(token_ids, keys, contents, path, max_blocks, cache_salt)
        return result

    def _walk(self, keys: Sequence[str]) -> list[tuple[Node, int]]:
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

    def _explain(self, token_ids, keys, contents, path, max_blocks, cache_salt) -> tuple[str, dict]:
        bs = self.block_size
        matched = sum(used for _, used in path)
        start = matched * bs
        continuations = self._continuations(path, cache_salt)
        if matched == max_blocks:
            rest = list(token_ids[start:len(token_ids) - 1])
            if not rest:
                return "full_match", {}
            equal = max((common_prefix(rest, toks) for _, toks in continuations), default=0)
            return "block_floor", {"position": start, "block_size": bs, "partial_tokens": len(rest),
                                   "equal_tokens": equal}
        if keys[matched] in self._evicted:
            seq, t, policy = self._evicted[keys[matched]]
            return "evicted", {"position": start, "block": matched, "hash": keys[matched], "evicted_seq": seq,
                               "evicted_at": t, "policy": policy}
        others = [s for s in self._salts_of.get(contents[matched], ()) if s != cache_salt]
        if others:
            return "salt", {"position": start, "block": matched, "other_salts": len(others)}
        if continuations:
            mine = list(token_ids[start:start + bs])
            same, node_id, theirs = max(((common_prefix(mine, toks), nid, toks) for nid, toks in continuations),
                                        key=lambda c: c[0])
            # same < bs: a full block with equal tokens would have had the same key.
            return "divergent", {"position": start + same, "block": matched, "node_id": node_id,
                                 "expected_id": theirs[same], "actual_id": mine[same]}
        if matched == 0:
            return "empty_cache", {}
        return "cache_end", {"position": start, "node_id": path[-1][0].node_id}

    def _continuations(self, path, cache_salt) -> list[tuple[int, list[int]]]:
        """Token ids of each cached block that could follow the matched prefix: (node id, tokens)."""
        bs = self.block_size
        if not path:
            nexts = [c for c in self.root.children.values() if c.cache_salt == cache_salt]
        else:
            node, used = path[-1]
            if used < len(node.blocks):
                return [(node.node_id, node.token_ids[used * bs:(used + 1) * bs])]
            nexts = list(node.children.values())
        return [(c.node_id, c.token_ids[:bs]) for c in nexts]

    # --- admission, growth, locks -------------------------------------------------------------------------
    def acquire(self, match: PrefixMatch, request_id: str) -> Node:
        """Commit a match the request is about to use: split the tree at its end, count the hit, lock the path.

        Call it right after `match` and `pool.share` of `match.blocks`, before allocating anything (an
        allocation may evict). Returns the request's lock handle (the root when nothing matched).
        """
        if not match.blocks:
            return self.root
        path = self._walk(match.keys)
        if [b for node, used in path for b in node.blocks[:used]] != match.blocks:
            raise RuntimeError("the prefix tree changed between match() and acquire(): call acquire right after "
                               "match, before anything allocates or evicts")
        node, used = path[-1]
        if used < len(node.blocks):
            path[-1] = (self._split(node, used), used)
        now = self.clock()
        for node, used in path:
            node.hit_count += 1
            node.last_access = now
            self.trace.emit("radix_hit", node_id=node.node_id, request_id=request_id, blocks=used)
        self.lock(path[-1][0])
        return path[-1][0]

    def insert(self, token_ids: Sequence[int], blocks: Sequence[int], cache_salt: str | None = None,
               request_id: str | None = None, texts: Sequence[str] | None = None,
               locked: Node | None = None) -> Node:
        """Put the full blocks of a sequence (its token ids and block table) into the tree; idempotent.

        Returns the node that ends the sequence's path of full blocks. With `locked` (the request's current
        handle) the lock moves from it to the returned node, which becomes the new handle.
        """
        bs = self.block_size
        n = min(len(token_ids) // bs, len(blocks))
        keys, contents = block_hashes(token_ids[:n * bs], bs, cache_salt)
        now = self.clock()
        node, i = self.root, 0
        while i < n:
            child = node.children.get(keys[i])
            if child is None:
                node = self._add_node(node, keys[i:n], contents[i:n], blocks[i:n], token_ids, texts, i,
                                      cache_salt, request_id)
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
            self.lock(node)  # lock the new path first so nothing on it is ever unlocked in between
            self.unlock(locked)
        return node

    # --- partly filled blocks ----------------------------------------------------------------------------
    def insert_tail(self, token_ids: Sequence[int], blocks: Sequence[int], num_computed: int,
                    cache_salt: str | None = None) -> bool:
        """Keep the partly filled block after the sequence's whole blocks (call before releasing it)."""
        bs = self.block_size
        full, valid = divmod(num_computed, bs)
        if not valid or len(blocks) <= full:
            return False
        physical = blocks[full]
        if self.holds(physical) or self.pool.ref_counts[physical] != 1:
            return False
        if full:
            keys, _ = block_hashes(token_ids[:full * bs], bs, cache_salt)
            path = self._walk(keys)
            if sum(used for _, used in path) != full:
                return False  # its whole blocks are not all cached: nothing would ever reach the tail
            parent_key, parent = keys[-1], path[-1][0]
        else:
            parent_key, parent = root_key(cache_salt), self.root
        return self.tails.add(parent_key, parent.node_id, physical, list(token_ids[full * bs:num_computed]))

    def reuse_partial(self, match: PrefixMatch, token_ids: Sequence[int],
                      cache_salt: str | None = None) -> tuple[int, int] | None:
        """A cached block (tail or whole) whose first tokens continue the match: (physical, tokens reused).

        Never covers the last token. The caller shares the block; the pool copies it before any write.
        """
        bs = self.block_size
        start = len(match.blocks) * bs
        limit = len(token_ids) - 1 - start
        if limit <= 0:
            return None
        rest = list(token_ids[start:start + bs])
        found = None
        tail = self.tails.best(match.keys[-1] if match.blocks else root_key(cache_salt), rest, limit)
        if tail is not None:
            found = (tail[0].physical, tail[1])
        path = self._walk(match.keys) if match.blocks else []
        if path and path[-1][1] < len(path[-1][0].blocks):
            node, used = path[-1]
            nexts = [(node.blocks[used], node.token_ids[used * bs:(used + 1) * bs])]
        else:
            node = path[-1][0] if path else self.root
            nexts = [(c.blocks[0], c.token_ids[:bs]) for c in node.children.values() if c.cache_salt == cache_salt]
        for physical, tokens in nexts:
            same = min(common_prefix(tokens, rest), limit)
            if same > 0 and (found is None or same > found[1]):
                found = (physical, same)
        return found

    def lock(self, node: Node) -> None:
        """A running request uses the path from the root to `node`: none of it may be evicted."""
        while node is not self.root:
            node.lock_ref += 1
            node = node.parent

    def unlock(self, node: Node) -> None:
        while node is not self.root:
            if node.lock_ref <= 0:
                raise RuntimeError(f"radix node {node.node_id} unlocked more often than locked")
            node.lock_ref -= 1
            node = node.parent

    def _add_node(self, parent, keys, contents, blocks, token_ids, texts, first, cache_salt, request_id) -> Node:
        bs = self.block_size
        for physical in blocks:
            if physical in self._node_of:
                raise RuntimeError(f"block {physical} is already in the prefix tree under another prefix: "
                                   "a cached block was written without copy-on-write")
            if self.pool.ref_counts[physical] == 0:
                raise RuntimeError(f"block {physical} has no owner: insert a request's blocks before releasing them")
        node = Node(next(self._ids), parent, cache_salt, parent.depth + len(parent.blocks), list(keys),
                    list(contents), list(blocks), list(token_ids[first * bs:(first + len(blocks)) * bs]))
        parent.children[keys[0]] = node
        self.nodes[node.node_id] = node
        for physical, key, content in zip(blocks, keys, contents):
            self._node_of[physical] = node
            self._salts_of.setdefault(content, Counter())[cache_salt] += 1
            self._evicted.pop(key, None)
        token_texts = (list(texts[first * bs:(first + len(blocks)) * bs]) if texts is not None
                       else [self.token_text(t) for t in node.token_ids])
        self.trace.emit("radix_insert", node_id=node.node_id, parent_id=parent.node_id, blocks=list(blocks),
                        token_ids=list(node.token_ids), texts=token_texts, request_id=request_id)
        return node

    def _split(self, node: Node, at: int) -> Node:
        """Cut `node` after `at` blocks. The prefix takes the node's id and place (as radix_split says); the
        node object keeps the suffix under a new id, so a request holding it as its handle still unlocks both."""
        bs = self.block_size
        prefix = Node(node.node_id, node.parent, node.cache_salt, node.depth, node.keys[:at], node.contents[:at],
                      node.blocks[:at], node.token_ids[:at * bs], {node.keys[at]: node}, node.lock_ref,
                      node.last_access, node.hit_count)
        node.parent.children[node.keys[0]] = prefix
        node.node_id = next(self._ids)
        node.parent, node.depth = prefix, node.depth + at
        del node.keys[:at], node.contents[:at], node.blocks[:at], node.token_ids[:at * bs]
        self.nodes[prefix.node_id] = prefix
        self.nodes[node.node_id] = node
        for physical in prefix.blocks:
            self._node_of[physical] = prefix
        self.trace.emit("radix_split", node_id=prefix.node_id, new_node_id=node.node_id, at=at)
        return prefix

    # --- the BlockCache protocol and eviction -------------------------------------------------------------
    def keep_on_release(self, physical: int) -> bool:
        node = self._node_of.get(physical)
        if node is None:
            return self.tails.keep_on_release(physical)
        self.trace.emit("block_cached", physical=physical, hash=node.keys[node.blocks.index(physical)])
        return True

    def num_evictable(self) -> int:
        """Cached blocks that repeated `evict_one` calls would reclaim now (exact, walks the tree)."""
        ref, total = self.pool.ref_counts, 0
        order, stack = [], [self.root]
        while stack:
            node = stack.pop()
            order.append(node)
            stack.extend(node.children.values())
        cleared: dict[int, bool] = {}  # node id -> every block of its subtree would go
        for node in reversed(order):  # children before parents
            if node is self.root:
                continue
            count = 0
            if not node.lock_ref and all(cleared[c.node_id] for c in node.children.values()):
                for physical in reversed(node.blocks):  # only a tail of unreferenced blocks can go
                    if ref[physical]:
                        break
                    count += 1
            total += count
            cleared[node.node_id] = count == len(node.blocks)
        return total + len(self.tails.evictable())

    def evict_one(self) -> int | None:
        """Reclaim the policy's choice among the last blocks of unlocked leaves; the pool frees it."""
        tail = self.tails.evict_one(self.policy)  # a tail costs fewer than block_size tokens to recompute
        if tail is not None:
            return tail
        ref = self.pool.ref_counts
        candidates = [node for node in self.nodes.values() if node is not self.root and not node.children
                      and not node.lock_ref and ref[node.blocks[-1]] == 0]
        if not candidates:
            return None
        return self._evict_tail(min(candidates, key=self._priority))

    def evict(self, num_blocks: int) -> list[int]:
        """Evict up to `num_blocks` cached blocks now and put them on the pool's free list (tests, CLI)."""
        evicted = []
        while len(evicted) < num_blocks and (physical := self.evict_one()) is not None:
            self.pool.free.append(physical)
            evicted.append(physical)
        return evicted

    def _priority(self, node: Node) -> tuple:
        """Sort key of a leaf's last block: the smallest is evicted first. Ties go to the deeper block."""
        position = node.depth + len(node.blocks) - 1
        if self.policy == "lru":
            return (node.last_access, -position, node.node_id)
        if self.policy == "lfu":
            return (node.hit_count, node.last_access, -position, node.node_id)
        # cost: expected recompute work = (hits + 1) x attention pairs of the block (its queries attend to
        # every earlier position, so deep blocks cost more; projections and MLP cost the same everywhere).
        return ((node.hit_count + 1) * recompute_cost(position, self.block_size), node.last_access, node.node_id)

    def _evict_tail(self, node: Node) -> int:
        physical, key = node.blocks[-1], node.keys[-1]
        event = self.trace.emit("block_evicted", physical=physical, hash=key, policy=self.policy,
                                node_id=node.node_id)
        self._evicted[key] = (event["seq"], event["t"], self.policy)
        while len(self._evicted) > self._evicted_memory:
            self._evicted.popitem(last=False)
        salts = self._salts_of[node.contents[-1]]
        salts[node.cache_salt] -= 1
        if not salts[node.cache_salt]:
            del salts[node.cache_salt]
            if not salts:
                del self._salts_of[node.contents[-1]]
        del self._node_of[physical]
        first_key = node.keys[0]
        del node.blocks[-1], node.keys[-1], node.contents[-1], node.token_ids[-self.block_size:]
        if not node.blocks:
            del node.parent.children[first_key]
            del self.nodes[node.node_id]
            self.trace.emit("radix_evict", node_id=node.node_id)
        return physical


def recompute_cost(logical: int, block_size: int) -> float:
    """Attention (query, key) pairs to recompute block `logical`: each position p attends to p + 1 keys."""
    first = logical * block_size
    return block_size * first + block_size * (block_size + 1) / 2
