"""Plain decode rows set aside in bulk (engine/core/quiet_rows.py) change no figure: every run here is
compared with the same run taken step by step through the engine, under budgets and sequence limits tight
enough that older prefills take the rest of a step's budget, pools small enough to evict and preempt, recorded
and fresh outputs, partly filled blocks reused or not, and generated tokens cached or not."""

from __future__ import annotations

import random

import pytest

from kvtui.whatif.requests import SimRequest
from kvtui.whatif.simulate import SimConfig, simulate


def _figures(result):
    per_request = {rid: r.as_dict() for rid, r in result.ledger.requests.items()}
    return (
        result.hit_tokens,
        result.causes,
        result.steps,
        result.preemptions,
        result.simulated_seconds,
        result.partial_tokens,
        per_request,
    )


def token_workload(seed: int, n: int = 40) -> list[SimRequest]:
    """Chats over a few shared heads, arriving in bursts, some with recorded outputs."""
    rng = random.Random(seed)
    heads = [list(range(1000 * h, 1000 * h + rng.randint(20, 90))) for h in range(4)]
    out, t = [], 0.0
    for i in range(n):
        t += rng.choice([0.0, 0.0, 0.003, 0.05])
        prompt = rng.choice(heads) + [50_000 + 100 * i + k for k in range(rng.randint(1, 60))]
        recorded = [70_000 + 100 * i + k for k in range(rng.randint(1, 30))] if rng.random() < 0.5 else None
        out.append(SimRequest(f"r{i}", t, prompt, recorded, rng.randint(1, 30) if recorded is None else 1))
    return out


def hash_workload(seed: int, n: int = 60, block: int = 16) -> list[SimRequest]:
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        t += rng.choice([0.0, 0.01, 0.2])
        ids = [0, 1 + rng.randrange(3)] + [100 + 10 * i + k for k in range(rng.randint(0, 5))]
        length = (len(ids) - 1) * block + rng.randint(1, block)
        out.append(
            SimRequest(
                f"m{i}",
                t,
                None,
                None,
                rng.randint(1, 40),
                hash_ids=ids,
                input_length=length,
                trace_block_size=block,
            )
        )
    return out


CONFIGS = [
    SimConfig(256, 16, max_batched_tokens=40, max_num_seqs=6),
    SimConfig(512, 16, max_batched_tokens=64),
    SimConfig(4096, 16, max_batched_tokens=96, max_num_seqs=3),
    SimConfig(4096, 16),
    SimConfig(320, 16, partial_hits=False, max_batched_tokens=48),
]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_token_workloads_step_by_step_and_in_bulk_agree(config, seed):
    requests = token_workload(seed)
    fast = simulate(requests, config)
    slow = simulate(token_workload(seed), config, fast_forward=False)
    assert _figures(fast) == _figures(slow)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("seed", [1, 2])
def test_hash_id_workloads_step_by_step_and_in_bulk_agree(config, seed):
    fast = simulate(hash_workload(seed), config, hash_ids=True)
    slow = simulate(hash_workload(seed), config, hash_ids=True, fast_forward=False)
    assert _figures(fast) == _figures(slow)
