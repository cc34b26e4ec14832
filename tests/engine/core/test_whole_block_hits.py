"""EngineConfig(partial_hits=False): prefix hits in whole blocks only, vLLM's granularity (kvtui bench vllm
holds it against a real vLLM). vLLM serves at most floor((n - 1) / block_size) whole blocks of an n-token prompt:
its last token is always computed, so a fully cached block-aligned prompt loses its whole last block."""

from __future__ import annotations

from tests.engine.core.test_kv_cache import BS, prefill, request
from tests.helpers.model_free import model_free_manager


def cached_after(manager, first: list[int], second: list[int]) -> int:
    a = request("a", first)
    prefill(manager, a)
    manager.free(a)
    b = request("b", second)
    manager.admit(b)
    return b.num_cached


def vllm_hit(prompt_len: int, cached_blocks: int) -> int:
    return min(cached_blocks, (prompt_len - 1) // BS) * BS


def test_whole_blocks_only_serve_what_vllm_serves():
    # (first prompt, second prompt): a block-aligned repeat, a repeat with a tail, a longer continuation
    cases = [
        (list(range(8)), list(range(8))),
        (list(range(10)), list(range(10))),
        (list(range(10)), [*range(10), 50, 51]),
        (list(range(12)), [*range(8), 60, 61, 62]),
    ]
    for first, second in cases:
        whole = model_free_manager(16, BS, partial_hits=False)
        hit = cached_after(whole, first, second)
        shared = next(
            (i for i, (x, y) in enumerate(zip(first, second)) if x != y), min(len(first), len(second))
        )
        assert hit == vllm_hit(len(second), shared // BS), (first, second)
        # by default the leading tokens of the next cached block count too: never fewer
        assert cached_after(model_free_manager(16, BS), first, second) >= hit


def test_the_aligned_repeat_differs_by_one_block_less_one_token():
    prompt = list(range(8))
    assert cached_after(model_free_manager(16, BS, partial_hits=False), prompt, prompt) == 4
    assert cached_after(model_free_manager(16, BS), prompt, prompt) == 7


def test_whole_blocks_only_keep_no_tails():
    manager = model_free_manager(16, BS, partial_hits=False)
    a = request("a", range(10))
    prefill(manager, a)
    manager.free(a)
    # the two whole blocks stay cached; the partly filled third goes back to the free list
    assert manager.num_cached() == 2 and manager.prefix_cache.tails.holds(2) is False
    assert 2 in manager.pool.free
