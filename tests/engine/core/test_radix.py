"""engine/core/radix.py: block hashes, salts, match and every miss reason. Insert, split and locks are
test_radix_insert.py; eviction policies test_radix_policies.py."""

from __future__ import annotations

from engine.core.hashing import block_hashes
from engine.core.miss_explainer import PrefixMatch
from engine.trace import validate_event
from tests.engine.core.radix_rig import BS, Rig, seq


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
