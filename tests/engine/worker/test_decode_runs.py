"""engine/worker/decode_runs.py: batch decode reading each sequence's run of consecutive blocks in place, the
blocks after it gathered, the parts merged by log-sum-exp: the same attention as one gather, and the same
logits as transformers' no-cache forward through the engine."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import engine.worker.attention as attention
import engine.worker.decode_runs as decode_runs
from engine.engine import Engine, EngineConfig
from engine.worker.decode_runs import _calls, decode_over_runs, plan_runs, runs_of
from tests.helpers.decode_paths import assert_decodes_match_no_cache
from tests.helpers.tiny_models import tiny_model

HKV, GROUPS, DIM, BS, BLOCKS = 2, 3, 8, 4, 64
CPU = torch.device("cpu")


def test_runs_are_sets_of_consecutive_ids_in_any_order():
    assert runs_of([5, 6, 7, 20, 8], 2) == [(5, 4)]
    assert runs_of([7, 6, 5, 4], 2) == [(4, 4)]
    assert runs_of([9, 3, 30, 31, 10, 11], 2) == [(9, 3), (30, 2)]
    assert runs_of([9, 3, 30, 31, 10, 11], 3) == [(9, 3)]
    assert runs_of([12], 2) == []
    assert runs_of([], 1) == []
    # a prompt's run, then fewer than min_blocks others
    assert runs_of([*range(10, 20), 3, 50], 3) == [(10, 10)]
    # a short ascending start does not hide a run elsewhere
    assert runs_of([3, 4, 1, 2], 3) == [(1, 4)]


def test_runs_of_one_length_evenly_spaced_are_one_call():
    # three runs 32 slots apart, one of another length, one sharing the first's start (a shared prefix)
    calls = _calls([0, 32, 64, 96, 0], [16, 16, 16, 8, 16], [0, 1, 2, 3, 4])
    assert [(c.rows, c.first_slot, c.stride, c.length) for c in calls] == [
        ([3], 96, 0, 8),
        ([0, 4], 0, 0, 16),
        ([1, 2], 32, 32, 16),
    ]


def reference(q, k_slots, v_slots, tables, positions, scale):
    """Each sequence alone: its first pos + 1 slots gathered, plain SDPA."""
    outs = []
    for i, (table, pos) in enumerate(zip(tables, positions)):
        slots = torch.tensor([b * BS + o for b in table for o in range(BS)][: pos + 1])
        k, v = k_slots[:, slots][None], v_slots[:, slots][None]
        outs.append(F.scaled_dot_product_attention(q[i : i + 1], k, v, scale=scale))
    return torch.cat(outs)


@pytest.mark.parametrize(
    "tables, positions",
    [
        # one sequence whose blocks are one run in any order: one view, the current block's unwritten end masked
        ([[*range(20, 11, -1)]], [33]),
        ([[5, 7, 6, 8]], [14]),
        # one sequence, one run and its current block (the two-part merge)
        ([[*range(0, 8), 40]], [33]),
        # prompts allocated back to back, then one scattered decode block each
        ([[*range(0, 8), 40], [*range(8, 16), 41], [*range(16, 24), 42]], [33, 34, 35]),
        # a shared prefix, a run of another length, a scattered table, a descending one, two runs, a padded rest
        (
            [
                [*range(0, 6), 50, 51],
                [*range(0, 6), 52],
                [*range(20, 27), 53],
                [60, 30, 62],
                [*range(47, 40, -1)],
            ],
            [30, 26, 28, 9, 26],
        ),
    ],
)
def test_runs_and_rest_merge_to_the_attention_of_one_gather(monkeypatch, tables, positions):
    monkeypatch.setattr(decode_runs, "MIN_RUN_TOKENS", 0)
    monkeypatch.setattr(decode_runs, "MIN_PIECE_TOKENS", 8)
    torch.manual_seed(0)
    kv = torch.randn(2, HKV, BLOCKS * BS, DIM)
    k_slots, v_slots = kv[0], kv[1]
    layer_blocks = kv.view(2 * HKV, BLOCKS, BS * DIM)
    q = torch.randn(len(tables), HKV, GROUPS, DIM)
    runs = plan_runs(tables, positions, BS, CPU, torch.float32)
    ours = decode_over_runs(runs, q, k_slots, v_slots, layer_blocks, 0.3)
    torch.testing.assert_close(
        ours, reference(q, k_slots, v_slots, tables, positions, 0.3), rtol=1e-5, atol=1e-5
    )


def test_short_runs_keep_the_gather():
    assert plan_runs([[0, 1, 2], [3, 4, 5]], [9, 9], BS, CPU, torch.float32) is None


@pytest.mark.parametrize("arch", ["llama-gqa", "qwen3-gqa", "llama-mqa"])
def test_engine_decodes_through_runs_with_the_no_cache_logits(monkeypatch, arch):
    monkeypatch.setattr(decode_runs, "MIN_RUN_TOKENS", 8)
    monkeypatch.setattr(decode_runs, "MIN_PIECE_TOKENS", 8)
    calls = []
    real = attention.decode_over_runs
    monkeypatch.setattr(attention, "decode_over_runs", lambda *a: calls.append(1) or real(*a))
    model = tiny_model(arch)
    engine = Engine.from_model(
        model, config=EngineConfig(block_size=4, num_blocks=200, max_batched_tokens=64)
    )
    # the torch path that the C kernel replaces where it can be built
    engine.runner.in_place_decode = False
    # equal lengths (one strided call), others, and a shared prefix through the prefix cache
    assert_decodes_match_no_cache(model, engine)
    assert calls, "the runs path never ran"
