"""engine/core/radix.py: insert / split / acquire / lock / release, and eviction through the pool."""

from __future__ import annotations

import pytest

from engine.core.blocks import OutOfBlocks
from engine.core.hashing import block_hashes
from tests.engine.core.radix_rig import BS, Rig, seq


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
