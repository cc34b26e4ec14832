"""The answers a report gives beyond the curve: the smallest capacity for a share of the ceiling (--target,
in bytes with --kv-config), the twin's accuracy against the server's cached tokens (fidelity), and routers
compared on the same arrivals with Dynamo's reachable and achieved hit rates."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kvtui.cli import main
from kvtui.whatif.answers import parse_targets, targets
from kvtui.whatif.curve import lru_curve, simulate_lru
from kvtui.whatif.fleet import simulate_fleet
from kvtui.whatif.routers import Router
from kvtui.whatif.simulate import SimConfig
from tests.kvtui.whatif.test_fleet import workload as grouped

REQUESTS = [["s", "a", "b"], ["s", "c"], ["s", "a", "b", "d"], ["s", "c", "e"], ["s", "a", "b", "d"]]


@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.8, 1.0])
def test_a_target_is_the_smallest_capacity_that_reaches_it(fraction):
    curve = lru_curve(REQUESTS)
    ceiling = simulate_lru(REQUESTS, 100).hit_blocks
    (answer,) = targets(curve, 16, [fraction], bytes_per_token=2.0, prompt_tokens=curve.total_tokens * 16)
    blocks = answer["capacity_tokens"] // 16
    # reached at that capacity, and not one block below it (plain simulations)
    assert simulate_lru(REQUESTS, blocks).hit_blocks >= fraction * ceiling
    assert blocks == 0 or simulate_lru(REQUESTS, blocks - 1).hit_blocks < fraction * ceiling
    assert answer["capacity_bytes"] == answer["capacity_tokens"] * 2


def test_targets_read_as_people_write_them():
    assert parse_targets("80%,0.9, 100%") == [0.8, 0.9, 1.0]
    for bad in ("0%", "120%", "most", ""):
        with pytest.raises(ValueError):
            parse_targets(bad)


def test_the_cli_answers_targets_in_tokens_and_bytes(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "hidden_size": 64,
                "torch_dtype": "float16",
            }
        )
    )
    args = [
        "whatif",
        "fixtures/traces/shared_system_8users.jsonl",
        "--capacity",
        "4KiB,1k",
        "--target",
        "50%,90%",
    ]
    result = CliRunner().invoke(main, [*args, "--kv-config", str(config), "--json", "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    per_token = report["bytes_per_token"]
    assert [t["fraction_of_ceiling"] for t in report["targets"]] == [0.5, 0.9]
    for t in report["targets"]:
        assert t["capacity_bytes"] == round(t["capacity_tokens"] * per_token)
    # every capacity in bytes too: 4 KiB asked, whole blocks of it given
    assert [p["capacity_bytes"] for p in report["points"]][:1] == [
        round(report["points"][0]["capacity_tokens"] * per_token)
    ]
    assert report["points"][0]["capacity_bytes"] <= 4096
    table = CliRunner().invoke(main, [*args, "--kv-config", str(config), "-q"]).output
    assert "target    90% of the one-pass ceiling" in table and "KiB" in table


def proxy_log(tmp_path, cached: list[int]):
    """Three requests through a 16-token-block server: a 40-token head shared (two whole blocks)."""
    head = list(range(100, 140))
    lines = []
    for i, server_cached in enumerate(cached):
        record = {
            "arrival": 10.0 * i,
            "request_id": f"p{i}",
            "prompt_token_ids": head + [500 + 10 * i + k for k in range(5)],
            "output_token_ids": [900 + i],
            "cached_tokens": server_cached,
            "server": {"block_size": 16, "num_gpu_blocks": 64, "enable_prefix_caching": True},
        }
        lines.append(json.dumps(record))
    path = tmp_path / "requests.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_log_with_the_servers_cached_tokens_gets_a_fidelity_section(tmp_path):
    # the server served the shared head's two whole blocks to p1 but, say, only one to p2
    path = proxy_log(tmp_path, [0, 32, 16])
    result = CliRunner().invoke(main, ["whatif", str(path), "--json", "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    # replayed at the server's settings: its block size and pool, whole blocks
    assert report["points"][0]["capacity_tokens"] == 64 * 16 and report["points"][0]["block_size"] == 16
    fidelity = report["fidelity"]
    assert (fidelity["requests"], fidelity["equal"]) == (3, 2)
    assert fidelity["mae_points"] == round(100 * (16 / 45) / 3, 4)
    (differ,) = fidelity["differ"]
    assert (differ["request_id"], differ["server"], differ["predicted"]) == ("p2", 16, 32)
    assert "the server computed 16 tokens" in differ["why"]
    table = CliRunner().invoke(main, ["whatif", str(path), "-q"]).output
    assert "fidelity  2 of 3 requests predicted exactly" in table and "p2: server 16, predicted 32" in table


def test_a_faithful_log_is_predicted_exactly(tmp_path):
    result = CliRunner().invoke(main, ["whatif", str(proxy_log(tmp_path, [0, 32, 32])), "--json", "-q"])
    fidelity = json.loads(result.output)["fidelity"]
    assert (fidelity["equal"], fidelity["mae_points"], fidelity["differ"]) == (3, 0.0, [])


def test_reachable_and_achieved_as_dynamo_measures_them():
    config = SimConfig(96, 16)
    aware = simulate_fleet(grouped(), config, 2, Router("kv_aware")).as_dict()
    plain = simulate_fleet(grouped(), config, 2, Router("round_robin")).as_dict()
    # the same arrivals: what was reachable is the router's doing too, but achieved never exceeds it
    for fleet in (aware, plain):
        assert 0 <= fleet["achieved_hit_rate"] <= fleet["reachable_hit_rate"]
        assert fleet["regret"] == fleet["reachable_hit_rate"] - fleet["achieved_hit_rate"]
    # kv_aware always picks the worker holding the group's prefix; round robin often does not
    assert aware["regret"] == 0 and plain["regret"] > 0


def test_the_cli_compares_routers_in_one_run():
    args = ["whatif", "fixtures/traces/shared_system_8users.jsonl", "--capacity", "256", "--workers", "2"]
    result = CliRunner().invoke(main, [*args, "--router", "kv_aware,round_robin", "--json", "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert [f["router"] for f in report["fleets"]] == ["kv_aware", "round_robin"]
    assert report["fleet"] == report["fleets"][0]
    assert all(f["regret"] >= 0 for f in report["fleets"])
    bad = CliRunner().invoke(main, [*args, "--router", "kv_aware,nearest"])
    assert bad.exit_code != 0 and "nearest" in bad.output


def test_routers_look_up_the_chain_hash_id_workers_hold():
    from kvtui.whatif.requests import SimRequest

    # the same 3-block head twice, far apart: the second lands where the first is cached
    requests = [
        SimRequest(
            f"m{i}", 10.0 * i, None, None, 2, hash_ids=[1, 2, 3, 10 + i], input_length=60, trace_block_size=16
        )
        for i in range(2)
    ]
    fleet = simulate_fleet(requests, SimConfig(1024, 16), 2, Router("kv_aware"), hash_ids=True).as_dict()
    # the second request: 3 blocks of 16 reachable, and achieved on the chosen worker
    assert fleet["reachable_hit_rate"] == fleet["achieved_hit_rate"] == 48 / 120
