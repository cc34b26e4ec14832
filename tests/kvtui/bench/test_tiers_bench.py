"""kvtui/bench/tiers.py on a tiny model: every round really serves the prompt cold, from the device and from host
(it refuses a pool that cannot), and the report and the saved figure say what was measured."""

import json

import pytest

from engine.engine import Engine, EngineConfig
from kvtui.bench.tiers import format_tiers, run_tiers, save
from tests.helpers.tiny_models import random_prompts, tiny_model


def engine(num_blocks: int, host_blocks: int) -> Engine:
    config = EngineConfig(block_size=4, num_blocks=num_blocks, host_blocks=host_blocks, partial_hits=False)
    return Engine.from_model(tiny_model("llama-gqa"), config=config)


def test_each_round_measures_the_three_ways_to_serve_the_prompt(tmp_path):
    prompt = random_prompts([4 * 6 + 1])[0]
    costs = run_tiers(engine(10, 10), prompt, rounds=2)
    assert costs.blocks == 6 and len(costs.rounds) == 2
    assert all(set(r) == {"cold", "device", "host", "offload", "load"} for r in costs.rounds)
    assert all(value > 0 for r in costs.rounds for value in r.values())
    per = costs.per_block()
    assert set(per) == {"recompute", "load", "offload"} and per["load"] > 0
    text = format_tiers(costs)
    assert "6 blocks of 4 tokens" in text and "load it from host" in text
    save(costs, tmp_path / "tiers.json")
    saved = json.loads((tmp_path / "tiers.json").read_text())
    assert saved["per_block_seconds"] == per and saved["measured"]


def test_a_host_tier_too_small_for_the_prompt_is_refused():
    prompt = random_prompts([4 * 6 + 1])[0]
    with pytest.raises(RuntimeError, match="too small"):
        run_tiers(engine(10, 3), prompt, rounds=1)
