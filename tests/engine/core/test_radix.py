"""engine/core/radix.py: match / insert / split / evict / lock / salt, every miss reason, every policy."""

from __future__ import annotations

import pytest

from engine.core.blocks import OutOfBlocks
from engine.core.eviction import POLICIES, recompute_cost
from engine.core.hashing import block_hashes
from engine.core.miss_explainer import PrefixMatch
from engine.core.radix import RadixCache
from engine.trace import TraceSink, validate_event
from tests.helpers.model_free import model_free_manager

BS = 4


class Rig:
    """A pool + tree and a tiny request driver that calls them the way the engine does."""

    def __init__(self, num_blocks: int = 16, policy: str = "lru", block_size: int = BS):
        self.events: list[dict] = []
        self.trace = TraceSink(clock=lambda: 0.0)
        self.trace.listeners.append(self.events.append)
        self.manager = model_free_manager(num_blocks, block_size, self.trace, policy)
        self.pool = self.manager.pool
        self.cache = self.manager.prefix_cache.radix
        self.requests: dict[str, tuple[list[int], list[int], object, str | None]] = {}

    def admit(self, rid: str, tokens: list[int], salt: str | None = None) -> PrefixMatch:
        """Admission: match, share the cached prefix, acquire (lock), allocate the rest, insert full blocks."""
        match = self.cache.match(tokens, salt)
        table = list(match.blocks)
        for logical, physical in enumerate(table):
            self.pool.share(physical, rid, logical)
        node = self.cache.acquire(match, rid)
        for logical in range(len(table), self.pool.blocks_for(len(tokens))):
            table.append(self.manager.allocate_block(rid, logical))
        node = self.cache.insert(tokens, table, salt, rid, locked=node)
        self.requests[rid] = (list(tokens), table, node, salt)
        return match

    def finish(self, rid: str) -> None:
        tokens, table, node, salt = self.requests.pop(rid)
        node = self.cache.insert(tokens, table, salt, rid, locked=node)
        self.cache.unlock(node)
        self.manager.release_table(table, rid)

    def run(self, rid: str, tokens: list[int], salt: str | None = None) -> PrefixMatch:
        match = self.admit(rid, tokens, salt)
        self.finish(rid)
        return match

    def types(self, since: int = 0) -> list[str]:
        return [e["type"] for e in self.events[since:]]

    def of_type(self, etype: str) -> list[dict]:
        return [e for e in self.events if e["type"] == etype]


def seq(*blocks: int, extra: tuple[int, ...] = ()) -> list[int]:
    """Tokens: one block of BS copies of each value given, then `extra` tokens."""
    return [v for v in blocks for _ in range(BS)] + list(extra)


# --- hashing ---------------------------------------------------------------------------------------------
def test_block_hashes_are_chained_and_stable_across_runs():
    keys, contents = block_hashes([1, 2, 3, 4, 5, 6, 7, 8, 9], 4)
    # pinned: sha256, no process salt
    assert keys == contents == ["c86df02568ab148c", "7ed3481a77caf1e5"]
    # Same second block after a different first block: a different key (the chain names the whole prefix).
    assert block_hashes([0, 2, 3, 4, 5, 6, 7, 8], 4)[0][1] != keys[1]


def test_salt_changes_every_key_but_not_the_content_hash():
    keys, contents = block_hashes(list(range(8)), 4, cache_salt="tenant-a")
    plain_keys, plain_contents = block_hashes(list(range(8)), 4)
    assert contents == plain_contents
    assert not set(keys) & set(plain_keys)
    assert block_hashes(list(range(8)), 4, adapter_id="lora-1")[1] != plain_contents


# --- match and the miss explainer ----------------------------------------------------------------------
def test_empty_cache_and_short_prompt():
    rig = Rig()
    assert rig.cache.match(seq(1, 2, extra=(3,))).reason == "empty_cache"
    rig.run("a", seq(1, 2, extra=(3,)))
    # exactly one block: the last token is computed, so nothing can match
    short = rig.cache.match(seq(1))
    assert (short.reason, short.blocks, short.detail) == (
        "short_prompt",
        [],
        {"prompt_tokens": 4, "block_size": 4},
    )
    # one block + 1 token: the block can match
    one_more = rig.cache.match(seq(1, extra=(9,)))
    assert one_more.reason == "full_match" and len(one_more.blocks) == 1


def test_full_match_leaves_only_the_last_token():
    rig = Rig()
    rig.run("a", seq(1, 2, extra=(3,)))
    match = rig.cache.match(seq(1, 2, extra=(7,)))
    assert match.reason == "full_match" and match.num_tokens == 8 and len(match.blocks) == 2
    assert (match.matchable_tokens, match.block_lookups) == (8, 2)


def test_a_fully_cached_prompt_backs_off_one_block():
    rig = Rig()
    rig.run("a", seq(1, 2, 3))
    match = rig.cache.match(seq(1, 2, 3))
    assert len(match.blocks) == 2 and match.reason == "block_floor"
    assert match.detail == {"position": 8, "block_size": 4, "partial_tokens": 3, "equal_tokens": 3}


def test_block_floor_counts_tokens_equal_to_a_cached_continuation():
    rig = Rig()
    rig.run("a", seq(1, 2, 3))
    match = rig.cache.match(seq(1, 2, extra=(3, 3, 9)))
    assert (
        match.reason == "block_floor"
        and match.detail["equal_tokens"] == 2
        and match.detail["partial_tokens"] == 2
    )


def test_divergent_names_the_first_difference_and_later_equal_tokens_never_count():
    rig = Rig()
    rig.run("a", seq(1, 2, 3, extra=(0,)))
    prompt = seq(1, 2, 3, extra=(0,))
    # one token differs inside block 1; everything after it is equal again
    prompt[5] = 9
    match = rig.cache.match(prompt)
    assert match.blocks == rig.cache.match(seq(1, extra=(0,))).blocks
    assert match.reason == "divergent"
    assert {k: match.detail[k] for k in ("position", "block", "expected_id", "actual_id")} == {
        "position": 5,
        "block": 1,
        "expected_id": 2,
        "actual_id": 9,
    }


def test_divergent_picks_the_closest_sibling():
    rig = Rig()
    rig.run("a", seq(1, 2, extra=(0,)))
    rig.run("b", seq(1, 3, extra=(0,)))
    prompt = seq(1, 3, extra=(0,))
    prompt[6] = 7
    match = rig.cache.match(prompt)
    assert match.reason == "divergent" and match.detail["position"] == 6 and match.detail["expected_id"] == 3


def test_cache_end_when_the_cached_sequence_stops():
    rig = Rig()
    rig.run("a", seq(1, 2))
    match = rig.cache.match(seq(1, 2, 3, extra=(4,)))
    assert len(match.blocks) == 2 and match.reason == "cache_end" and match.detail["position"] == 8


def test_evicted_says_when_and_by_which_policy():
    rig = Rig(policy="lfu")
    rig.run("a", seq(1, 2, extra=(0,)))
    evicted = rig.cache.evict(1)
    event = rig.of_type("block_evicted")[-1]
    assert evicted == [event["physical"]]
    match = rig.cache.match(seq(1, 2, extra=(0,)))
    assert match.reason == "evicted" and len(match.blocks) == 1
    assert match.detail["evicted_seq"] == event["seq"] and match.detail["policy"] == "lfu"
    assert match.detail["position"] == 4 and match.detail["hash"] == event["hash"]
    # recomputed and cached again: no longer "evicted"
    rig.run("b", seq(1, 2, extra=(0,)))
    assert rig.cache.match(seq(1, 2, extra=(0,))).reason == "full_match"


def test_evicted_everything_still_says_evicted_not_empty():
    rig = Rig()
    rig.run("a", seq(1, 2, extra=(0,)))
    rig.cache.evict(10)
    assert rig.cache.match(seq(1, 2, extra=(0,))).reason == "evicted"


def test_different_salts_never_share_and_the_explainer_says_so():
    rig = Rig()
    rig.run("a", seq(1, 2, extra=(0,)), salt="tenant-a")
    other = rig.cache.match(seq(1, 2, extra=(0,)), "tenant-b")
    assert other.blocks == [] and other.reason == "salt" and other.detail["other_salts"] == 1
    # no salt is a salt of its own
    assert rig.cache.match(seq(1, 2, extra=(0,))).reason == "salt"
    same = rig.cache.match(seq(1, 2, extra=(0,)), "tenant-a")
    assert len(same.blocks) == 2
    rig.run("b", seq(1, 2, extra=(0,)), salt="tenant-b")
    a_blocks = set(rig.cache.match(seq(1, 2, extra=(0,)), "tenant-a").blocks)
    b_blocks = set(rig.cache.match(seq(1, 2, extra=(0,)), "tenant-b").blocks)
    assert len(a_blocks) == len(b_blocks) == 2 and not a_blocks & b_blocks


def test_event_fields_fill_token_texts_and_disabled():
    rig = Rig()
    rig.run("a", seq(1, 2, extra=(0,)))
    fields = rig.cache.match(seq(1, 5, extra=(0,))).event_fields("r1", text=lambda t: f"<{t}>")
    assert fields["detail"]["expected_text"] == "<2>" and fields["detail"]["actual_text"] == "<5>"
    assert fields["matched_tokens"] == 4
    assert validate_event({"seq": 0, "t": 0.0, "type": "prefix_match", **fields}) is None
    off = PrefixMatch.disabled(9, BS)
    assert (off.reason, off.num_tokens, off.block_lookups, off.matchable_tokens) == ("disabled", 0, 2, 8)


def test_match_changes_nothing():
    rig = Rig()
    rig.run("a", seq(1, 2, 3, extra=(0,)))
    before = (
        len(rig.events),
        {n: (len(node.blocks), node.hit_count, node.last_access) for n, node in rig.cache.nodes.items()},
    )
    rig.cache.match(seq(1, extra=(0,)))
    assert before == (
        len(rig.events),
        {n: (len(node.blocks), node.hit_count, node.last_access) for n, node in rig.cache.nodes.items()},
    )


# --- insert and split ------------------------------------------------------------------------------------
def test_insert_adds_full_blocks_only_and_is_idempotent():
    rig = Rig()
    rig.admit("a", seq(1, 2, extra=(3, 3)))
    tokens, table, node, _ = rig.requests["a"]
    insert = rig.of_type("radix_insert")[-1]
    assert insert["blocks"] == table[:2] and insert["token_ids"] == seq(1, 2) and insert["parent_id"] == 0
    assert insert["texts"] == [str(t) for t in seq(1, 2)] and insert["request_id"] == "a"
    count = len(rig.events)
    assert rig.cache.insert(tokens, table, None, "a") is node
    # nothing new
    assert len(rig.events) == count
    # the partial block stays out of the tree
    assert not rig.cache.holds(table[2])


def test_insert_with_texts_and_growing_sequence_chains_nodes():
    rig = Rig()
    rig.admit("a", seq(1, extra=(2, 2)))
    tokens, table, node, _ = rig.requests["a"]
    tokens += [2, 2, 5]
    table.append(rig.manager.allocate_block("a", 2))
    texts = [f"t{t}" for t in tokens]
    new = rig.cache.insert(tokens, table, None, "a", texts=texts, locked=node)
    assert new.parent is node and new.blocks == [table[1]]
    assert rig.of_type("radix_insert")[-1]["texts"] == ["t2"] * 4
    assert (node.lock_ref, new.lock_ref) == (1, 1)


def test_divergence_inside_a_node_splits_at_the_block_boundary():
    rig = Rig()
    rig.run("a", seq(1, 2, 3, extra=(0,)))
    first = rig.of_type("radix_insert")[0]
    rig.run("b", seq(1, 2, 4, extra=(0,)))
    split = rig.of_type("radix_split")[0]
    assert split == {**split, "node_id": first["node_id"], "at": 2}
    prefix = rig.cache.nodes[first["node_id"]]
    assert prefix.blocks == first["blocks"][:2]
    assert sorted(len(c.blocks) for c in prefix.children.values()) == [1, 1]
    assert {c.token_ids[0] for c in prefix.children.values()} == {3, 4}
    assert rig.of_type("radix_insert")[-1]["parent_id"] == prefix.node_id


def test_duplicate_computation_keeps_the_trees_block():
    rig = Rig()
    # A block is inserted as soon as it is full, so a later request shares it (no duplicate)...
    rig.admit("a", seq(1, extra=(2,)))
    rig.admit("b", seq(1, extra=(2,)))
    assert rig.requests["b"][1][0] == rig.requests["a"][1][0]
    # ...but two running requests that fill the same block independently compute it twice.
    rig.admit("c", [7, 7])
    rig.admit("d", [7, 7])
    for rid in ("c", "d"):
        tokens, table, node, salt = rig.requests[rid]
        tokens += [7, 7, 8]
        table.append(rig.manager.allocate_block(rid, 1))
        rig.requests[rid] = (tokens, table, rig.cache.insert(tokens, table, salt, rid, locked=node), salt)
    c_block, d_block = rig.requests["c"][1][0], rig.requests["d"][1][0]
    assert rig.cache.holds(c_block) and not rig.cache.holds(d_block)
    rig.finish("d")
    assert rig.events[-1] == {**rig.events[-1], "type": "block_freed", "physical": d_block}
    assert rig.pool.ref_counts[d_block] == 0 and d_block in rig.pool.free
    assert rig.cache.match([7] * 4 + [0]).blocks == [c_block]


def test_insert_rejects_a_block_cached_under_another_prefix_and_unowned_blocks():
    rig = Rig()
    rig.admit("a", seq(1, extra=(0,)))
    _, table, _, _ = rig.requests["a"]
    with pytest.raises(RuntimeError, match="without copy-on-write"):
        rig.cache.insert(seq(5, extra=(0,)), table, None, "a")
    with pytest.raises(RuntimeError, match="no owner"):
        rig.cache.insert(seq(6, extra=(0,)), [9, 10], None, "a")


# --- locks and eviction -----------------------------------------------------------------------------------
def test_acquire_splits_a_partly_matched_node_locks_the_path_and_counts_hits():
    rig = Rig()
    rig.run("a", seq(1, 2, 3, extra=(0,)))
    match = rig.admit("b", seq(1, 2, 5, extra=(0,)))
    assert len(match.blocks) == 2
    node = rig.requests["b"][2]
    hits = rig.of_type("radix_hit")
    assert hits[-1]["request_id"] == "b" and hits[-1]["blocks"] == 2
    prefix = rig.cache.nodes[hits[-1]["node_id"]]
    assert prefix.hit_count == 1 and prefix.lock_ref == 1 and node.parent is prefix
    suffix = next(c for c in prefix.children.values() if c is not node)
    assert suffix.lock_ref == 0


def test_acquire_rejects_a_stale_match():
    rig = Rig()
    rig.run("a", seq(1, 2, extra=(0,)))
    match = rig.cache.match(seq(1, 2, extra=(0,)))
    rig.cache.evict(1)
    with pytest.raises(RuntimeError, match="changed between match"):
        rig.cache.acquire(match, "b")


def test_locked_paths_are_never_evicted_and_leaves_go_before_parents():
    rig = Rig()
    rig.run("a", seq(1, 2, 3, extra=(0,)))
    # locks [1, 2]; a's [3] is an unlocked cached leaf
    rig.admit("b", seq(1, 2, 5, extra=(0,)))
    assert rig.cache.num_evictable() == 1
    assert len(rig.cache.evict(10)) == 1
    evicted = rig.of_type("block_evicted")[-1]
    assert rig.of_type("radix_evict")[-1]["node_id"] == evicted["node_id"]
    prefix = rig.cache.match(seq(1, 2, extra=(0,))).blocks
    rig.finish("b")
    # Now everything is unlocked: b's leaf [5] goes first, then the shared prefix, its last block first.
    assert rig.cache.num_evictable() == 3
    order = rig.cache.evict(10)
    assert len(order) == 3 and order[1:] == prefix[::-1]
    assert rig.cache.num_evictable() == 0 and len(rig.cache.nodes) == 1
    assert rig.pool.num_free() == rig.pool.num_blocks


def test_lock_and_unlock_must_balance():
    rig = Rig()
    rig.run("a", seq(1, 2, extra=(0,)))
    node = rig.cache.acquire(rig.cache.match(seq(1, 2, extra=(0,))), "b")
    rig.cache.unlock(node)
    with pytest.raises(RuntimeError, match="unlocked more often"):
        rig.cache.unlock(node)
    # the root is never locked: a no-op
    rig.cache.lock(rig.cache.root)
    assert rig.cache.root.lock_ref == 0


def test_release_keeps_tree_blocks_cached_and_frees_the_rest():
    rig = Rig()
    rig.admit("a", seq(1, extra=(2,)))
    # release_table empties the request's own list
    table = list(rig.requests["a"][1])
    start = len(rig.events)
    rig.finish("a")
    kinds = {(e["type"], e.get("physical")) for e in rig.events[start:]}
    assert ("block_cached", table[0]) in kinds and ("block_freed", table[1]) in kinds
    cached = next(e for e in rig.events[start:] if e["type"] == "block_cached")
    assert cached["hash"] == block_hashes(seq(1), BS)[0][0]
    assert rig.cache.num_cached() == 1 and rig.manager.num_available() == rig.pool.num_blocks


def test_the_pool_evicts_through_the_cache_when_it_runs_out():
    rig = Rig(num_blocks=3)
    # 2 cached + 1 freed
    rig.run("a", seq(1, 2, extra=(0,)))
    # needs 3: takes the free one and evicts both cached blocks
    rig.admit("b", seq(5, 6, extra=(0,)))
    assert len(rig.of_type("block_evicted")) == 2
    with pytest.raises(OutOfBlocks):
        rig.manager.allocate_block("c", 0)


def test_evicting_a_cached_block_that_is_matched_again_re_references_it():
    rig = Rig()
    rig.run("a", seq(1, 2, extra=(0,)))
    match = rig.admit("b", seq(1, 2, extra=(9,)))
    assert all(rig.pool.ref_counts[b] == 1 for b in match.blocks)
    assert rig.cache.num_evictable() == 0 and rig.cache.num_cached() == 0


# --- policies -------------------------------------------------------------------------------------------
def _three_leaves(policy: str) -> Rig:
    """Three cached leaves under a shared root block: x (2 deep, old), y (3 deep, hit twice), z (2 deep, new)."""
    rig = Rig(num_blocks=32, policy=policy)
    rig.run("x", seq(1, 2, extra=(0,)))
    rig.run("y", seq(1, 3, 3, extra=(0,)))
    rig.run("y2", seq(1, 3, 3, extra=(0,)))
    rig.run("y3", seq(1, 3, 3, extra=(0,)))
    rig.run("z", seq(1, 4, extra=(0,)))
    return rig


def _first_victim_token(rig: Rig) -> int:
    physical = rig.cache.evict(1)[0]
    event = rig.of_type("block_evicted")[-1]
    assert event["physical"] == physical and event["policy"] == rig.cache.policy
    return next(e for e in rig.of_type("radix_insert") if physical in e["blocks"])["token_ids"][-1]


def test_lru_evicts_the_least_recently_used_leaf():
    assert _first_victim_token(_three_leaves("lru")) == 2


def test_lfu_evicts_the_least_hit_leaf_with_lru_ties():
    rig = _three_leaves("lfu")
    # x and z: 0 hits; x is older
    assert _first_victim_token(rig) == 2
    # then z; y (hit twice) stays
    assert _first_victim_token(rig) == 4
    assert rig.cache.match(seq(1, 3, 3, extra=(0,))).reason == "full_match"


def test_cost_evicts_the_cheapest_block_to_recompute():
    rig = _three_leaves("cost")
    # y's tail is block 2 (deep, hit twice): most expensive. x and z tails are block 1: x is older.
    assert _first_victim_token(rig) == 2
    assert _first_victim_token(rig) == 4
    assert recompute_cost(2, 4) > recompute_cost(1, 4) > recompute_cost(0, 4) == 10


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="lru, lfu, cost"):
        Rig(policy="random")
    assert POLICIES == ("lru", "lfu", "cost")


def test_an_injected_clock_orders_lru():
    now = [0.0]
    trace = TraceSink(clock=lambda: 0.0)
    manager = model_free_manager(8, BS, trace)
    cache = manager.prefix_cache.radix = RadixCache(manager.pool, trace, clock=lambda: now[0])
    # inserted second but "older"
    for value, t in ((1, 5.0), (2, 1.0)):
        now[0] = t
        table = [manager.allocate_block("r", 0), manager.allocate_block("r", 1)]
        cache.insert(seq(value, extra=(0,)), table)
        manager.release_table(table, "r")
    victim = cache.evict(1)[0]
    assert cache.match(seq(2, extra=(0,))).reason == "evicted" and not cache.holds(victim)


# --- the trace --------------------------------------------------------------------------------------------
def test_every_event_matches_the_schema():
    rig = _three_leaves("lru")
    rig.admit("w", seq(1, 3, 9, extra=(0,)))
    rig.cache.evict(100)
    rig.finish("w")
    rig.cache.evict(100)
    assert {
        "radix_insert",
        "radix_split",
        "radix_hit",
        "radix_evict",
        "block_cached",
        "block_evicted",
    } <= set(rig.types())
    for event in rig.events:
        assert validate_event(event) is None, event
