"""H2O for the `kvtui sinks` experiment (engine/worker/heavy_hitters.py): its budget holds, and with room for
every key it is full attention."""

import torch

from engine.worker.heavy_hitters import heavy_hitter_logprobs, heavy_hitter_mask
from tests.helpers.reference import no_cache_logits
from tests.helpers.tiny_models import random_prompts, tiny_model


def test_a_budget_larger_than_the_text_is_full_attention():
    model = tiny_model("llama-gqa")
    tokens = random_prompts([30], seed=1)[0]
    ours, run = heavy_hitter_logprobs(model, tokens, heavy=20, recent=20)
    logprobs = torch.log_softmax(no_cache_logits(model, tokens), dim=-1)
    expected = logprobs[:-1].gather(1, torch.tensor(tokens[1:])[:, None])[:, 0]
    assert (ours - expected).abs().max().item() <= 1e-4
    assert set(run.kept) == {0, 1, 2} and all(k.all() for k in run.kept.values())


def test_every_query_reads_at_most_the_budget_the_recent_keys_and_itself():
    torch.manual_seed(0)
    scores = torch.randn(2, 3, 40, 40)
    allowed, kept = heavy_hitter_mask(scores, heavy=4, recent=3)
    # after the last token the cache keeps room for the next one
    assert allowed.sum(-1).max().item() == 7 and kept.sum(-1).tolist() == [6, 6]
    for t in range(40):
        # causal, itself and the recent keys always in
        assert not allowed[:, t, t + 1 :].any() and allowed[:, t, max(0, t - 2) : t + 1].all()
    # a key dropped once never comes back
    assert not (allowed[:, 1:] & ~allowed[:, :-1] & ~torch.eye(40, dtype=torch.bool)[1:]).any()
