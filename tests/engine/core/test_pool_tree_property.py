"""Stateful property test of the block pool and the radix tree together.

Random submit / grow / fork / edit / finish / evict, driven the way the engine drives them, with a shadow of
what every physical block holds (the tokens whose K/V were written into each slot). After every step:
ref counts equal owners, free + used + cached = total, the tree and the pool agree, nothing leaks, every lock
ref is held by a live request, cached contents are never overwritten, and no locked or referenced block is
ever evicted. KVTUI_HYPOTHESIS_EXAMPLES sets the number of examples (200 by default; CI runs 1,000).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from engine.core.eviction import POLICIES, count_evictable, priority
from engine.core.hashing import block_hashes
from engine.core.tree_node import Node
from engine.trace import TraceSink
from tests.helpers.model_free import model_free_manager

EXAMPLES = int(os.environ.get("KVTUI_HYPOTHESIS_EXAMPLES", "200"))

# A 3-token alphabet and 2 salts make shared prefixes, divergences and duplicates frequent.
tokens_st = st.lists(st.integers(0, 2), min_size=1, max_size=12)
salt_st = st.sampled_from([None, "t1"])
pick_st = st.integers(0, 10_000)


@dataclass
class Seq:
    rid: str
    tokens: list[int]
    table: list[int]
    # lock handle in the tree
    node: Node
    salt: str | None


class PoolTree(RuleBasedStateMachine):
    @initialize(block_size=st.integers(1, 4), num_blocks=st.integers(3, 20), policy=st.sampled_from(POLICIES))
    def setup(self, block_size, num_blocks, policy):
        self.trace = TraceSink(clock=lambda: 0.0)
        self.trace.listeners.append(self._check_event)
        self.manager = model_free_manager(num_blocks, block_size, self.trace, policy)
        self.pool = self.manager.pool
        self.cache = self.manager.prefix_cache.radix
        self.bs = block_size
        self.content: dict[int, list] = {b: [None] * block_size for b in range(num_blocks)}
        self.live: dict[str, Seq] = {}
        self.next_id = 0

    # --- helpers ------------------------------------------------------------------------------------------
    def _check_event(self, event: dict) -> None:
        """Every eviction (explicit or from an allocation) takes an unreferenced, unlocked leaf tail."""
        if event["type"] == "block_evicted":
            node = self.cache.nodes[event["node_id"]]
            physical = event["physical"]
            assert self.pool.ref_counts[physical] == 0
            assert node.lock_ref == 0 and not node.children and node.blocks[-1] == physical
            # the eviction heap picks what a scan of every leaf would: the policy's minimum
            leaves = [
                n
                for n in self.cache.nodes.values()
                if n is not self.cache.root
                and not n.children
                and not n.lock_ref
                and self.pool.ref_counts[n.blocks[-1]] == 0
            ]
            assert node is min(leaves, key=lambda n: priority(n, self.cache.policy, self.bs))

    def _copy(self, src: int, dst: int, num_tokens: int) -> None:
        self.content[dst][:num_tokens] = self.content[src][:num_tokens]

    def _write(self, seq: Seq, start: int) -> None:
        for position in range(start, len(seq.tokens)):
            self.content[seq.table[position // self.bs]][position % self.bs] = seq.tokens[position]

    def _needs_copy(self, physical: int) -> bool:
        return self.pool.ref_counts[physical] > 1 or self.cache.holds(physical)

    def _private(self, seq: Seq, logical: int, num_tokens: int) -> None:
        """Copy-on-write before writing into block `logical`: shared with another table or with the tree."""
        self.manager.copy_on_write(seq.table, logical, seq.rid, num_tokens)
        # the copies the worker would make, in order
        for copy in self.pool.take_copies():
            self._copy(copy.src, copy.dst, copy.num_tokens)

    def _pick(self, pick: int) -> Seq:
        return self.live[sorted(self.live)[pick % len(self.live)]]

    def _insert(self, seq: Seq) -> None:
        seq.node = self.cache.insert(seq.tokens, seq.table, seq.salt, seq.rid, locked=seq.node)

    # --- rules --------------------------------------------------------------------------------------------
    @rule(tokens=tokens_st, salt=salt_st)
    def submit(self, tokens, salt):
        rid = f"r{self.next_id}"
        self.next_id += 1
        match = self.cache.match(tokens, salt)
        assert match.num_tokens <= len(tokens) - 1 or not match.blocks
        table = list(match.blocks)
        for logical, physical in enumerate(table):
            self.pool.share(physical, rid, logical)
        seq = Seq(rid, list(tokens), table, self.cache.acquire(match, rid), salt)
        need = self.pool.blocks_for(len(tokens)) - len(table)
        # the scheduler would wait: give the prefix back
        if need > self.manager.num_available():
            self.cache.unlock(seq.node)
            self.manager.release_table(table, rid)
            return
        for logical in range(len(table), len(table) + need):
            table.append(self.manager.allocate_block(rid, logical))
        self._write(seq, match.num_tokens)
        self._insert(seq)
        self.live[rid] = seq

    @precondition(lambda self: self.live)
    @rule(pick=pick_st, new=tokens_st)
    def grow(self, pick, new):
        seq = self._pick(pick)
        n = len(seq.tokens)
        partial = n % self.bs
        copy = bool(partial) and self._needs_copy(seq.table[-1])
        need = self.pool.blocks_for(n + len(new)) - len(seq.table) + copy
        if need > self.manager.num_available():
            return
        if copy:
            self._private(seq, len(seq.table) - 1, partial)
        for logical in range(len(seq.table), self.pool.blocks_for(n + len(new))):
            seq.table.append(self.manager.allocate_block(seq.rid, logical))
        seq.tokens += new
        self._write(seq, n)
        self._insert(seq)

    @precondition(lambda self: self.live)
    @rule(pick=pick_st)
    def fork(self, pick):
        parent = self._pick(pick)
        rid = f"r{self.next_id}"
        self.next_id += 1
        for logical, physical in enumerate(parent.table):
            self.pool.share(physical, rid, logical)
        self.cache.lock(parent.node)
        self.live[rid] = Seq(rid, list(parent.tokens), list(parent.table), parent.node, parent.salt)

    @precondition(lambda self: self.live)
    @rule(pick=pick_st, at=pick_st)
    def edit(self, pick, at):
        """Truncate at position m: keep blocks before m's block, keep m's block's valid part (private)."""
        seq = self._pick(pick)
        if not seq.tokens:
            return
        m = at % len(seq.tokens)
        kept_whole, partial = divmod(m, self.bs)
        # The engine's order: drop the tail, move the lock to the kept path, then make m's block private.
        self.manager.release_table(seq.table, seq.rid, kept_whole + (1 if partial else 0))
        del seq.tokens[m:]
        self._insert(seq)
        if partial and self._needs_copy(seq.table[kept_whole]):
            if self.manager.num_available() >= 1:
                self._private(seq, kept_whole, partial)
            # no block to copy into: drop m's block too (the edit moves to the block boundary)
            else:
                self.manager.release_table(seq.table, seq.rid, kept_whole)
                del seq.tokens[kept_whole * self.bs :]

    @precondition(lambda self: self.live)
    @rule(pick=pick_st)
    def finish(self, pick):
        seq = self.live.pop(self._pick(pick).rid)
        self._insert(seq)
        self.cache.unlock(seq.node)
        self.manager.release_table(seq.table, seq.rid)

    @rule(n=st.integers(1, 6))
    def evict(self, n):
        evictable = self.cache.num_evictable()
        free_before = self.pool.num_free()
        evicted = self.cache.evict(n)
        assert len(evicted) == min(n, evictable)
        assert self.pool.num_free() == free_before + len(evicted)

    @rule(tokens=tokens_st, salt=salt_st)
    def lookup(self, tokens, salt):
        """A match serves exactly the tokens asked for, stops before the last one, and explains itself."""
        match = self.cache.match(tokens, salt)
        for logical, physical in enumerate(match.blocks):
            assert self.content[physical] == tokens[logical * self.bs : (logical + 1) * self.bs]
        assert len(match.blocks) <= (len(tokens) - 1) // self.bs
        assert match.reason in {
            "divergent",
            "block_floor",
            "evicted",
            "salt",
            "short_prompt",
            "full_match",
            "empty_cache",
            "cache_end",
        }
        if match.reason == "divergent":
            position = match.detail["position"]
            assert match.num_tokens <= position < match.num_tokens + self.bs
            assert tokens[position] == match.detail["actual_id"] != match.detail["expected_id"]

    # --- invariants ---------------------------------------------------------------------------------------
    @invariant()
    def ref_counts_equal_owners(self):
        owners = Counter(b for seq in self.live.values() for b in seq.table)
        assert self.pool.ref_counts == [owners[b] for b in range(self.pool.num_blocks)]

    @invariant()
    def free_used_cached_partition_the_pool(self):
        free = list(self.pool.free)
        assert len(set(free)) == len(free)
        used = {b for b, count in enumerate(self.pool.ref_counts) if count > 0}
        tree = self._tree_blocks()
        cached = {b for b in tree if self.pool.ref_counts[b] == 0}
        assert not set(free) & used and not set(free) & tree
        # so nothing leaks
        assert len(free) + len(used) + len(cached) == self.pool.num_blocks
        assert self.cache.num_cached() == len(cached)
        assert self.pool.num_used() == len(used)
        assert self.cache.num_evictable() <= len(cached)

    @invariant()
    def the_kept_evictable_count_is_a_fresh_walk(self):
        # the tree walks again only after a reference, lock or shape changed; an eviction takes one off
        assert self.cache.num_evictable() == count_evictable(self.cache.root, self.pool.ref_counts)

    def _tree_blocks(self) -> set[int]:
        """Walk the tree: structure, hashes and contents hold; return its blocks (each in exactly one node)."""
        blocks: list[int] = []
        stack: list[tuple[Node, list[int]]] = [(self.cache.root, [])]
        while stack:
            node, prefix = stack.pop()
            for key, child in node.children.items():
                assert child.parent is node and child.keys[0] == key and child.blocks
                assert child.depth == node.depth + len(node.blocks)
                assert node is self.cache.root or child.cache_salt == node.cache_salt
                assert len(child.keys) == len(child.contents) == len(child.blocks)
                assert len(child.token_ids) == len(child.blocks) * self.bs
                tokens = prefix + child.token_ids
                keys, _ = block_hashes(tokens, self.bs, child.cache_salt)
                assert keys[child.depth :] == child.keys
                for i, physical in enumerate(child.blocks):
                    assert self.content[physical] == child.token_ids[i * self.bs : (i + 1) * self.bs]
                    assert self.cache.holds(physical)
                blocks += child.blocks
                stack.append((child, tokens))
        assert len(blocks) == len(set(blocks)) == len(self.cache._node_of)
        return set(blocks)

    @invariant()
    def every_lock_ref_is_a_live_request(self):
        expected: Counter = Counter()
        for seq in self.live.values():
            node = seq.node
            while node is not self.cache.root:
                expected[node.node_id] += 1
                node = node.parent
        for node_id, node in self.cache.nodes.items():
            assert node.lock_ref == expected[node_id], node

    @invariant()
    def live_contents_are_intact(self):
        for seq in self.live.values():
            assert len(seq.table) == self.pool.blocks_for(len(seq.tokens))
            for position, token in enumerate(seq.tokens):
                assert self.content[seq.table[position // self.bs]][position % self.bs] == token


PoolTree.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestPoolTree = PoolTree.TestCase
