"""/metrics of the offloading tiers: pages written by vLLM 0.32's own offloading metric classes and by
prometheus_client with SGLang 0.5.23's HiCache names and labels (each fixture's first line says which)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtui.sources.prometheus import summarize
from kvtui.state.fleet import FleetState
from kvtui.state.fleet_stats import attach_totals
from kvtui.state.fleet_view import worker_cells
from kvtui.state.server_figures import offload_facts
from kvtui.widgets.fleet_table import offload_text

HERE = Path(__file__).parent
VLLM_OFFLOAD = (HERE / "vllm_offload_metrics.prom").read_text()
VLLM_SIMPLE = (HERE / "vllm_simple_metrics.prom").read_text()
SGLANG_HICACHE = (HERE / "sglang_hicache_metrics.prom").read_text()
MIB = 1 << 20


def test_vllm_offloading_connector_counters_per_engine():
    ranks = summarize(VLLM_OFFLOAD)
    assert set(ranks) == {"0", "1"}
    r0 = ranks["0"]
    # the flat names, not also the deprecated transfer_type ones it exports beside them (no double count)
    assert (r0["offload_load_bytes"], r0["offload_store_bytes"]) == (3 * MIB, 5 * MIB)
    assert (r0["offload_load_seconds"], r0["offload_store_seconds"]) == (0.25, 0.5)
    assert (r0["external_queries"], r0["external_hits"]) == (1000, 400)
    assert offload_facts(r0) == {
        "external_hit_rate": 0.4,
        "loaded": 3 * MIB,
        "stored": 5 * MIB,
        "unit": "bytes",
    }
    assert offload_text(offload_facts(r0)) == "offload: connector hit 40%, loaded 3.0 MiB stored 5.0 MiB"


def test_vllm_deprecated_transfer_names_are_read_when_the_flat_ones_are_missing():
    old_only = "\n".join(line for line in VLLM_OFFLOAD.splitlines() if "load_bytes" not in line)
    old_only = "\n".join(line for line in old_only.splitlines() if "store_bytes" not in line)
    r1 = summarize(old_only)["1"]
    assert (r1["offload_load_bytes"], r1["offload_store_bytes"]) == (1 * MIB, 2 * MIB)


def test_vllm_simple_cpu_offload():
    r0 = summarize(VLLM_SIMPLE)["0"]
    assert r0["offload_load_blocks"] == 42 and r0["offload_capacity_blocks"] == 8192
    assert r0["offload_backend"] == "cpu"
    facts = offload_facts(r0)
    assert (facts["loaded"], facts["unit"], facts["capacity_blocks"]) == (42, "blocks", 8192)


def test_vllm_cpu_tier_size_from_its_config_info():
    """vLLM 0.33's vllm:kv_offload_config_info, with CPUOffloadingInfo's label names: chunks x blocks each."""
    page = (
        'vllm:kv_offload_config_info{cpu_blocks_per_chunk="4",cpu_kv_cache_size_bytes="1073741824",'
        'cpu_kv_cache_size_tokens="None",cpu_num_chunks="1024",engine="0",model_name="qwen"} 1.0\n'
    )
    assert summarize(page)["0"]["offload_capacity_blocks"] == 4096


def test_sglang_hicache_reads_one_tp_rank_and_the_kv_pool():
    ranks = summarize(SGLANG_HICACHE)
    # its radix-cache counters carry dp_rank, its scheduler and tokenizer ones do not
    assert set(ranks) == {"", "0"}
    shared, r0 = ranks[""], ranks["0"]
    assert (shared["host_used_tokens"], shared["host_total_tokens"]) == (2048, 8192)
    # two TP ranks report the same count: read once, not summed
    assert r0["evicted_tokens"] == 4096 and r0["storage_store_tokens"] == 1024
    # the kv pool's, not the mamba pool's
    assert (r0["offload_load_tokens"], r0["offload_store_tokens"]) == (640, 3072)
    assert shared["cached_tokens"] == {"device": 900, "host": 300, "storage": 100}
    # a worker of that server sees both: its rank's samples over the unlabelled ones
    fleet = FleetState({})
    fleet.apply(
        {"seq": 0, "t": 0.0, "type": "attach_worker", "worker": "w", "source": "s", "name": "w", "rank": 0}
    )
    for i, (rank, facts) in enumerate(sorted(ranks.items())):
        fleet.apply(
            {"seq": 1 + i, "t": 1.0, "type": "attach_metrics", "source": "s", "rank": rank, "facts": facts}
        )
    cells = worker_cells(fleet, fleet.workers["w"])
    assert cells["kv_usage"] == 0.5
    assert cells["offload"]["host_usage"] == 0.25 and cells["offload"]["loaded"] == 640
    assert offload_text(cells["offload"]) == (
        "offload: loaded 640 tokens stored 3,072 tokens, host 25% used, hit tokens device 900 host 300 storage 100"
    )


def test_rates_over_the_interval_and_a_server_without_offloading():
    before = summarize(VLLM_OFFLOAD)["0"]
    after = {**before, "external_queries": 1500.0, "external_hits": 900.0, "offload_load_bytes": 4.0 * MIB}
    facts = offload_facts(after, before)
    assert facts["external_hit_rate"] == pytest.approx(1.0) and facts["loaded"] == MIB
    assert offload_facts({"kv_usage": 0.3}) == {} and offload_text({}) == ""


def test_stats_totals_over_the_trace():
    fleet = FleetState({})
    first = summarize(VLLM_OFFLOAD)["0"]
    last = {**first, "external_queries": 3000.0, "external_hits": 1400.0, "offload_store_bytes": 9.0 * MIB}
    for seq, facts in enumerate((first, last)):
        fleet.apply(
            {
                "seq": seq,
                "t": float(seq),
                "type": "attach_metrics",
                "source": "s",
                "rank": "0",
                "facts": facts,
            }
        )
    offload = attach_totals(fleet)["offload"]
    assert offload["connector_hit_tokens"] == 1000 and offload["connector_query_tokens"] == 2000
    assert offload["connector_hit_rate"] == 0.5 and offload["stored_bytes"] == 4 * MIB
    assert attach_totals(FleetState({}))["offload"] is None
