"""Fleet routers on a workload whose right answer is known: two prefix groups that each fit one worker."""

import json

from kvtui.whatif.fleet import simulate_fleet
from kvtui.whatif.requests import SimRequest
from kvtui.whatif.routers import Router
from kvtui.whatif.simulate import SimConfig

GROUP = {"A": list(range(100, 148)), "B": list(range(500, 548))}


def workload():
    # A and B arrive together first (both running: kv_aware's decode_blocks sends B elsewhere), then in the
    # order B B A A B B A A ...: round robin mixes the groups on both workers, a cache-aware router does not
    order = ["A", "B"] + ["B", "B", "A", "A"] * 4
    times = [0.0, 0.0] + [1.0 + i for i in range(len(order) - 2)]
    return [
        SimRequest(f"{g}{i}", t, GROUP[g] + [9000 + i] * 16, None, 1)
        for i, (g, t) in enumerate(zip(order, times))
    ]


def test_kv_aware_keeps_each_group_on_one_worker_and_beats_round_robin():
    config = SimConfig(96, 16)
    aware = simulate_fleet(workload(), config, 2, Router("kv_aware"))
    plain = simulate_fleet(workload(), config, 2, Router("round_robin"))
    # 16 of 18 requests could reuse their group's 48 tokens; every later one does under kv_aware
    assert aware.result.hit_tokens == 16 * 48
    assert plain.result.hit_tokens < aware.result.hit_tokens
    assert aware.duplicated_blocks == 0
    assert [w["requests"] for w in aware.per_worker] == [9, 9]


def test_least_loaded_and_longest_prefix_pick_as_stated():
    config = SimConfig(960, 16)
    fleet = simulate_fleet(workload()[:2], config, 2, Router("least_loaded"))
    assert [w["requests"] for w in fleet.per_worker] == [1, 1]
    best = simulate_fleet(workload(), config, 2, Router("longest_prefix"))
    assert best.result.hit_tokens == 16 * 48


def test_the_fleet_table_says_reachable_counts_whole_blocks_at_routing_time():
    """shared_system_8users under kv_aware: the hit rate (82.4%) is above "reachable" (79.8%, whole prompt
    blocks at routing): the label says which model each column counts, so the two do not read as a contradiction."""
    from click.testing import CliRunner

    from kvtui.cli import main

    trace = "fixtures/traces/shared_system_8users.jsonl"
    args = ["whatif", trace, "--capacity", "256", "--workers", "2", "--router", "kv_aware", "--json"]
    fleet = json.loads(CliRunner().invoke(main, args).output)["fleet"]
    assert fleet["token_hit_rate"] > fleet["reachable_hit_rate"]
    table = CliRunner().invoke(main, args[:-1]).output
    assert (
        "reachable and achieved: whole prompt blocks at routing time (the hit rate may be above them)"
        in table
    )
