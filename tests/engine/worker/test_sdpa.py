"""engine/worker/sdpa.py: a chunk over a cached prefix split into prefix + causal self parts equals one masked call."""

import pytest
import torch

from engine.worker.sdpa import attend, causal_mask, chunk_over_prefix, merge


@pytest.mark.parametrize("hq,hkv,prefix,n", [(4, 2, 300, 37), (8, 1, 1, 5), (4, 4, 64, 1), (6, 3, 17, 64)])
def test_split_prefix_and_causal_self_equal_one_masked_call(hq, hkv, prefix, n):
    torch.manual_seed(prefix + n)
    q = torch.randn(1, hq, n, 16)
    k, v = torch.randn(1, hkv, prefix + n, 16), torch.randn(1, hkv, prefix + n, 16)
    ref = attend(q, k, v, causal_mask(n, prefix + n, "cpu"), None, None)
    ours = chunk_over_prefix(
        q, k[:, :, :prefix], v[:, :, :prefix], k[:, :, prefix:], v[:, :, prefix:], None, None
    )
    assert (ours - ref).abs().max().item() <= 1e-5


def test_soft_capped_scores_take_the_masked_path_and_stay_exact():
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 4, 9, 16), torch.randn(1, 2, 29, 16), torch.randn(1, 2, 29, 16)
    ref = attend(q, k, v, causal_mask(9, 29, "cpu"), 0.2, 5.0)
    ours = chunk_over_prefix(q, k[:, :, :20], v[:, :, :20], k[:, :, 20:], v[:, :, 20:], 0.2, 5.0)
    assert (ours - ref).abs().max().item() <= 1e-6
    plain = attend(q, k, v, causal_mask(9, 29, "cpu"), 0.2, None)
    # the cap changed the answer: the test can tell
    assert (ours - plain).abs().max().item() > 1e-3


def test_causal_mask_is_lower_right_aligned():
    mask = causal_mask(2, 5, "cpu")[0, 0]
    assert mask.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]


def test_merge_of_two_halves_equals_softmax_over_all_keys():
    torch.manual_seed(2)
    scores = torch.randn(1, 2, 3, 10)
    values = torch.randn(1, 2, 10, 4)
    whole = torch.softmax(scores, -1) @ values
    parts = [
        (torch.softmax(s, -1) @ v, torch.logsumexp(s, -1))
        for s, v in ((scores[..., :6], values[:, :, :6]), (scores[..., 6:], values[:, :, 6:]))
    ]
    assert (merge(*parts[0], *parts[1]) - whole).abs().max().item() <= 1e-6
