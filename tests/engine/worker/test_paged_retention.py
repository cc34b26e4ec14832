"""window_layout="paged" keeps cached only the window blocks a later hit resumes at (vLLM 0.32's default
prefix_cache_retention_interval 0; engine/core/hybrid_hit.py's `retained_blocks`): on a shared-prefix workload
through tiny random window models, each request's cached tokens are the what-if twin's
(kvtui/whatif/hybrid_cache.py) on the same tokens, and every answer stays the model's own."""

import pytest

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.models.kv_groups import INDEX
from kvtui.whatif.hybrid_cache import HybridCache, HybridRequest
from tests.engine.worker.test_ring import SMALL, assert_exact, window_model, window_of
from tests.helpers.tiny_models import random_prompts

BS = 4
MAX_TOKENS = 3


def workload(w: int) -> list[list[int]]:
    """A system prompt of 3 windows and a bit, three turns after it, one of them twice, and a short prefix."""
    system, *turns = random_prompts([3 * w + 3, 5, 7, 6, 2], vocab=SMALL["vocab_size"], seed=11)
    return [
        system + turns[0],
        system + turns[1],
        system + turns[2],
        system + turns[2],
        system[: 2 * BS] + turns[3],
    ]


def twin_hits(groups, requests: list[tuple[list[int], list[int]]], num_blocks: int) -> list[int]:
    """The twin's cached tokens for each (prompt, output) in turn, computing what the engine computed: the
    prompt and every output token but the last."""
    cache = HybridCache(groups, num_blocks, BS)
    hits = []
    for i, (prompt, output) in enumerate(requests):
        req = HybridRequest(f"r{i}", list(prompt))
        assert cache.admit(req, len(prompt))
        for token in output[:-1]:
            req.tokens.append(token)
            cache.append(req, 1)
        cache.free(req)
        hits.append(req.hit)
    return hits


@pytest.mark.parametrize("style", ["alternating", "above-layer", "all-window"])
def test_a_shared_prefix_hits_what_the_twin_hits_and_stays_exact(style):
    model = window_model(style)
    w = window_of(model)
    engine = Engine.from_model(
        model, config=EngineConfig(window_layout="paged", block_size=BS, num_blocks=256)
    )
    done = []
    for prompt in workload(w):
        out = engine.generate([prompt], SamplingParams(max_tokens=MAX_TOKENS, return_logits=True))[0]
        assert_exact(model, style, out)
        done.append(out)
    # a follow-up turn of the first conversation, its answer included
    follow = done[0].prompt_token_ids + done[0].token_ids + [5, 6, 7]
    out = engine.generate([follow], SamplingParams(max_tokens=MAX_TOKENS, return_logits=True))[0]
    assert_exact(model, style, out)
    done.append(out)
    hits = [out.cached_tokens for out in done]
    # vLLM's groups: the engine's, less the layerless table group of a model with no full-attention layer
    groups = [g for g in engine.cache.groups.groups if g.kind != INDEX]
    assert hits == twin_hits(groups, [(o.prompt_token_ids, o.token_ids) for o in done], 256)
    # the second turn finds the system prompt in the tree, not in the window groups
    assert hits[1] == 0
    if style != "all-window":
        # the third resumes at the junction the second left
        assert hits[2] == (3 * w + 3) // BS * BS
    assert hits[3] > hits[2] and hits[5] > 0
