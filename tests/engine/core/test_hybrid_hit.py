"""vLLM's hybrid hit rule on block presence alone: a full hit, a hit limited by the window group, by the match
unit, and by a Mamba-style group; vLLM's grouping of Gemma 3's layers."""

import pytest

from engine.core.hybrid_hit import groups_from_layers, hybrid_hit
from engine.models.kv_groups import FULL, MAMBA, SLIDING, KVGroup

B = 32
GEMMA = [KVGroup(SLIDING, 512, (0,)), KVGroup(SLIDING, 512, (1,)), KVGroup(FULL)]


def held(table: dict):
    """cached(group, block) from {group: set of block indices}."""
    return lambda g, i: i in table.get(g, set())


def test_a_full_hit_is_every_whole_block_before_the_last_token():
    everything = {g: set(range(40)) for g in range(3)}
    hit = hybrid_hit(GEMMA, held(everything), 1000, B)
    # 999 tokens before the last: 31 whole blocks
    assert hit.tokens == 992 and hit.limited_by is None and hit.bound == 992


def test_a_hit_longer_than_the_window_needs_only_the_last_window_of_the_window_groups():
    # the window groups kept blocks 15-30 (the 511 tokens before 992), the full group all of them
    window = set(range(15, 31))
    hit = hybrid_hit(GEMMA, held({0: window, 1: window, 2: set(range(31))}), 1000, B)
    assert hit.tokens == 992


def test_the_window_group_limits_a_hit_whose_last_window_was_evicted():
    # blocks 20-30 of the window groups evicted: the last run of 16 contiguous blocks ends at block 19
    window = set(range(0, 20))
    hit = hybrid_hit(GEMMA, held({0: window, 1: window, 2: set(range(31))}), 1000, B)
    assert hit.tokens == 20 * B and hit.limited_by == 0
    assert hit.per_group[2] == 992


def test_window_groups_of_one_spec_count_a_block_only_where_all_hold_it():
    # group 0 lacks block 25, group 1 lacks block 10: together no run of 16 ends after block 25 ... but 26-30
    # (5 blocks) and 11-24 (14) are too short; the run from block 0 is 10 blocks
    hit = hybrid_hit(
        GEMMA, held({0: set(range(31)) - {25}, 1: set(range(31)) - {10}, 2: set(range(31))}), 1000, B
    )
    assert hit.tokens == 10 * B and hit.limited_by == 0


def test_a_short_run_from_the_first_block_is_a_hit():
    hit = hybrid_hit(GEMMA, held({0: {0, 1, 2}, 1: {0, 1, 2}, 2: set(range(10))}), 1000, B)
    assert hit.tokens == 3 * B and hit.limited_by == 0


def test_the_full_group_bounds_the_window_groups():
    everything = set(range(31))
    hit = hybrid_hit(GEMMA, held({0: everything, 1: everything, 2: set(range(5))}), 1000, B)
    assert hit.tokens == 5 * B and hit.limited_by == 2


def test_the_match_unit_rounds_the_hit_down():
    everything = {g: set(range(31)) for g in range(3)}
    hit = hybrid_hit(GEMMA, held(everything), 1000, B, prefix_match_unit=256)
    assert hit.tokens == 768 and hit.bound == 768
    # vLLM #54607: a 784-token unit against a shared prefix of 240 tokens: nothing can hit
    assert hybrid_hit([KVGroup(FULL)], held({0: set(range(7))}), 300, 16, prefix_match_unit=784).tokens == 0


def test_a_mamba_group_serves_only_a_state_at_a_unit_boundary():
    groups = [KVGroup(MAMBA), KVGroup(FULL)]
    # states cached at blocks 7 (256 tokens) and 15 (512); the full group holds 30 blocks (768 in units)
    hit = hybrid_hit(groups, held({0: {7, 15}, 1: set(range(30))}), 1000, B, prefix_match_unit=256)
    assert hit.tokens == 512 and hit.limited_by == 0
    # the state at 512 evicted: the hit falls back to 256
    hit = hybrid_hit(groups, held({0: {7}, 1: set(range(30))}), 1000, B, prefix_match_unit=256)
    assert hit.tokens == 256


def test_a_unit_that_is_not_a_multiple_of_the_block_is_refused():
    with pytest.raises(ValueError, match="multiple of the block size 32"):
        hybrid_hit(GEMMA, held({}), 100, B, prefix_match_unit=48)


def test_gemma_3_layers_make_five_window_groups_and_one_full_group():
    types = (["sliding_attention"] * 5 + ["full_attention"]) * 3
    groups = groups_from_layers(types, 512)
    assert [g.kind for g in groups] == [SLIDING] * 5 + [FULL]
    assert groups[0].layers == (0, 6, 12) and groups[5].layers == (5, 11, 17)
    assert all(g.window == 512 for g in groups[:5]) and groups[5].window is None
