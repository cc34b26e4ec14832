"""The simulation: hand-computed hit rates, causes that add up, the manager's own decisions, torch never
imported, and -o traces that kvtui replays."""

import json
import subprocess
import sys

from click.testing import CliRunner

from engine.core.kv_cache import KVCacheManager
from kvtui.whatif.loaders import load
from kvtui.whatif.requests import SimRequest
from kvtui.whatif.simulate import SimConfig, simulate


def req(rid, t, prompt, out=1, salt=None):
    return SimRequest(rid, t, list(prompt), None, out, salt)


def test_a_repeated_prompt_hits_every_whole_block_by_hand():
    # 40 tokens, blocks of 16: the second request reuses 2 whole blocks + 7 tokens of the cached tail (the
    # last token is always computed): 39 of 40
    requests = [req("a", 0.0, range(40)), req("b", 10.0, range(40))]
    result = simulate(requests, SimConfig(1024, 16))
    assert result.prompt_tokens == 80
    assert result.ledger.requests["b"].hit_tokens == 39
    assert result.hit_tokens == 39
    assert result.causes == {"compulsory": 39, "last_token": 2}


def test_whole_blocks_only_serve_what_vllm_serves():
    # the same two requests with hits in whole blocks only (--whole-blocks): 2 blocks of the 40 tokens, as vLLM
    requests = [req("a", 0.0, range(40)), req("b", 10.0, range(40))]
    result = simulate(requests, SimConfig(1024, 16, partial_hits=False))
    assert result.ledger.requests["b"].hit_tokens == 32 and result.partial_tokens == 0
    assert sum(result.causes.values()) == result.prompt_tokens - result.hit_tokens


def test_causes_add_up_and_name_capacity_salt_and_divergence():
    base = list(range(1000, 1064))
    requests = [
        req("a", 0.0, base + [1]),
        req("salted", 1.0, base + [2], salt="tenant"),
        req("diverged", 2.0, base[:20] + [7] + base[21:] + [3]),
        req("filler", 3.0, range(5000, 5100)),
        req("again", 4.0, base + [4]),
    ]
    result = simulate(requests, SimConfig(112, 16))
    for record in result.ledger.requests.values():
        assert sum(record.all_causes().values()) == record.prompt_tokens - record.hit_tokens
    assert result.prompt_tokens - result.hit_tokens == sum(result.causes.values())
    assert result.ledger.requests["salted"].causes["salt"] == 64
    diverged = result.ledger.requests["diverged"]
    # one whole block and the 4 equal tokens of the next (a partial block reused), then the difference
    assert diverged.hit_tokens == 20 and diverged.detail["diverged_at"] == 20
    assert diverged.detail["expected_id"] == 1020 and diverged.detail["actual_id"] == 7
    assert diverged.causes == {"divergence": 44, "last_token": 1}
    again = result.ledger.requests["again"]
    assert again.causes["capacity"] > 0 and again.detail["policy"] == "lru"


def test_the_engines_early_stopping_can_allocate_gives_the_full_counts_answers(monkeypatch):
    # the engine's can_allocate stops counting evictable blocks once it has enough (has_evictable); counting
    # every one (num_available) must make the same decisions, so every figure of a run is the same
    workload = load("fixtures/traces/shared_system_8users.jsonl")
    config = SimConfig(320, 16, max_num_seqs=3, max_batched_tokens=64)
    fast = simulate(workload.requests, config)
    monkeypatch.setattr(KVCacheManager, "can_allocate", lambda self, n: n <= self.num_available())
    slow = simulate(workload.requests, config)
    assert (fast.hit_tokens, fast.causes, fast.steps, fast.preemptions) == (
        slow.hit_tokens,
        slow.causes,
        slow.steps,
        slow.preemptions,
    )


def test_hash_id_outputs_take_pool_space_but_are_never_cached():
    from kvtui.whatif.causes import MissLedger
    from kvtui.whatif.simulate import Worker

    worker = Worker(SimConfig(4096, 16), MissLedger(16), hash_ids=True)
    item = SimRequest("m", 0.0, None, None, 40, hash_ids=[0, 1], input_length=32, trace_block_size=16)
    worker.add(item)
    worker.drain()
    # 2 prompt blocks cached; the 40 generated tokens (2.5 blocks) went back free
    assert worker.manager.num_cached() == 2


def test_torch_is_never_imported():
    code = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers", "numpy"):
            raise ImportError("blocked " + name)
sys.meta_path.insert(0, Block())
from kvtui.whatif.loaders import load
from kvtui.whatif.simulate import simulate, SimConfig
from kvtui.whatif.fleet import simulate_fleet
from kvtui.whatif.routers import Router
from kvtui.commands import whatif_commands
w = load("fixtures/traces/shared_system_8users.jsonl")
print(simulate(w.requests, SimConfig(512, 16)).hit_tokens > 0, "torch" in sys.modules)
print(simulate_fleet(w.requests, SimConfig(512, 16), 2, Router("kv_aware")).as_dict()["workers"])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False", "2"]


def test_the_simulated_trace_replays_and_stats_reads_it(tmp_path):
    from kvtui.cli import main

    out = tmp_path / "sim.jsonl"
    runner = CliRunner()
    result = runner.invoke(
        main,
        [
            "whatif",
            "fixtures/traces/agents_shared_background.jsonl",
            "--capacity",
            "512",
            "-o",
            str(out),
            "--json",
            "-q",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert set(report) >= {"workload", "format", "requests", "prompt_tokens", "ceiling", "points", "optimal"}
    point = report["points"][0]
    assert {"capacity_tokens", "block_size", "eviction", "method", "token_hit_rate", "misses"} <= set(point)
    assert sum(point["misses"].values()) == round((1 - point["token_hit_rate"]) * report["prompt_tokens"])
    check = runner.invoke(main, ["replay", "--check", str(out)])
    assert check.exit_code == 0, check.output
    stats = runner.invoke(main, ["stats", "--json", str(out)])
    assert stats.exit_code == 0 and json.loads(stats.output)["error"] is None


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


def test_decode_runs_taken_at_once_give_every_figure_of_step_by_step():
    cases = [
        (
            load("fixtures/traces/shared_system_8users.jsonl"),
            SimConfig(320, 16, max_num_seqs=3, max_batched_tokens=64),
            False,
        ),
        (load("fixtures/traces/agents_shared_background.jsonl"), SimConfig(256, 16), False),
    ]
    base = list(range(1000, 1064))
    requests = [
        SimRequest(
            f"r{i}",
            0.01 * i,
            (base if i % 3 == 0 else list(range(5000 + 100 * i, 5064 + 100 * i))) + [i],
            None,
            40,
        )
        for i in range(12)
    ]
    cases += [
        (requests, SimConfig(192, 16, max_num_seqs=4, max_batched_tokens=64), False),
        (requests, SimConfig(4096, 16), False),
    ]
    for item in cases:
        workload, config, hash_ids = item
        reqs = workload if isinstance(workload, list) else workload.requests
        fast = simulate(reqs, config, hash_ids)
        slow = simulate(reqs, config, hash_ids, fast_forward=False)
        assert _figures(fast) == _figures(slow)


def test_decode_runs_on_a_hash_id_workload(tmp_path):
    # Mooncake-shaped requests (generated tokens take space, never cached): a tight and a roomy capacity
    from kvtui.whatif.synth import mooncake_like, write_jsonl

    records = sorted(mooncake_like(seed=1), key=lambda r: r["timestamp"])[:120]
    workload = load(str(write_jsonl(records, tmp_path / "m.jsonl")))
    for capacity in (150_000, 2_000_000):
        config = SimConfig(capacity // 512 * 512, 512)
        fast = simulate(workload.requests, config, hash_ids=True)
        slow = simulate(workload.requests, config, hash_ids=True, fast_forward=False)
        assert _figures(fast) == _figures(slow)
