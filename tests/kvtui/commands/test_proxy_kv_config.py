"""`kvtui proxy --kv-config --prefix-match-unit`: a hybrid model's groups and the server's match unit written
into the log's server settings, which `kvtui whatif` then replays with."""

import json
import time

from kvtui.commands.proxy_commands import kv_groups
from tests.kvtui.sources.test_proxy import Running, post, raw_exchange, upstream  # noqa: F401

CONFIG = "fixtures/attach/gemma3_270m_config.json"


def test_the_groups_and_the_unit_go_into_the_logs_server_settings(upstream):  # noqa: F811
    running = Running(upstream)
    groups = kv_groups(CONFIG)
    running.proxy.server_extra.update(
        kv_groups=[{"kind": g.kind, "window": g.window} for g in groups], prefix_match_unit=64
    )
    try:
        raw_exchange(running.proxy.port, post("/v1/completions", {"model": "m", "prompt": "hi"}))
        deadline = time.monotonic() + 30
        while not running.records and time.monotonic() < deadline:
            time.sleep(0.01)
        (record,) = running.records
    finally:
        running.close()
    server = record["server"]
    assert server["block_size"] == 16 and server["prefix_match_unit"] == 64
    assert server["kv_groups"] == [{"kind": "sliding_window", "window": 512}] * 5 + [
        {"kind": "full_attention", "window": None}
    ]


def test_a_config_with_one_full_attention_group_adds_nothing(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_hidden_layers": 30, "num_key_value_heads": 3, "head_dim": 64}))
    assert kv_groups(str(path)) == []
    assert len(kv_groups(CONFIG)) == 6
