"""engine/models/kv_groups.py: KV-cache groups as vLLM forms them, and the pool they share."""

import pytest

from engine.config import EngineConfig
from engine.models.kv_groups import kv_cache_groups, layers_per_block, paged_groups, table_group
from engine.models.shape import ModelShape

GEMMA3_270M = tuple(None if (i + 1) % 6 == 0 else 512 for i in range(18))


def test_gemma_3_270m_is_six_groups_of_three_layers():
    groups = kv_cache_groups(GEMMA3_270M)
    # 15 window layers cut into 5 groups taking every 5th; the 3 full layers one group (vLLM: six groups)
    assert [g.layers for g in groups] == [
        (0, 6, 12),
        (1, 7, 13),
        (2, 8, 14),
        (3, 9, 15),
        (4, 10, 16),
        (5, 11, 17),
    ]
    assert [g.kind for g in groups] == ["sliding_window"] * 5 + ["full_attention"]
    assert table_group(groups) == 5 and layers_per_block(groups) == 3


def test_group_size_is_the_fewest_layers_unless_the_most_are_under_one_and_a_half_times_that():
    # 12 window + 13 full: one group each, padded to 13 (gpt-oss-20b + a drafter in vLLM's comment)
    windows = (128,) * 12 + (None,) * 13
    assert [len(g.layers) for g in kv_cache_groups(windows)] == [12, 13]
    # 1 full + 2 window: groups of one layer
    assert [g.layers for g in kv_cache_groups((None, 4, 4))] == [(0,), (1,), (2,)]
    # one type: one group
    assert [g.layers for g in kv_cache_groups((None,) * 4)] == [(0, 1, 2, 3)]


def test_an_all_window_model_gets_a_layerless_table_group():
    groups = paged_groups((5, 5))
    assert [(g.kind, g.layers) for g in groups] == [("sliding_window", (0, 1)), ("index", ())]
    assert table_group(groups) == 1


def test_the_paged_pool_buys_blocks_of_the_largest_group():
    shape = ModelShape("g", 18, 4, 1, 256, "float32", 4, windows=GEMMA3_270M)
    ring = EngineConfig(block_size=32, kv_memory_mb=48)
    paged = EngineConfig(block_size=32, kv_memory_mb=48, window_layout="paged")
    # the same 3 layers a block either way: rings keep the window layers apart, the paged layout shares
    assert ring.pool_blocks(shape) == paged.pool_blocks(shape) == 48 * 2**20 // (3 * 2 * 256 * 4 * 32)
    assert paged.partial_hits is False and ring.partial_hits is True


def test_the_paged_layout_refuses_what_it_cannot_serve():
    with pytest.raises(ValueError, match="whole blocks"):
        EngineConfig(window_layout="paged", partial_hits=True)
    with pytest.raises(ValueError, match="'ring' or 'paged'"):
        EngineConfig(window_layout="rings")


def test_an_all_window_model_is_one_group_as_vllm_forms_it():
    """vLLM's grouping of a Mistral-like model (every layer a window) is one window group; only the paged
    layout's `paged_groups` adds the layerless table group the prefix tree needs."""
    assert [(g.kind, g.layers) for g in kv_cache_groups((5, 5, 5))] == [("sliding_window", (0, 1, 2))]
    assert [g.kind for g in paged_groups((5, 5, 5))] == ["sliding_window", "index"]
    assert layers_per_block(paged_groups((5, 5, 5))) == 3
