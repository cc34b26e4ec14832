"""`kvtui whatif --kv-dtype`: byte capacities converted at each K/V precision's bytes per token, in one run."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from engine.models.kv_budget import bytes_per_token_at, shape_from_config
from kvtui.cli import main
from tests.helpers.model_configs import LLAMA_3_8B as CONFIG

ROOT = Path(__file__).resolve().parents[3]


def test_bytes_per_token_at_each_precision():
    shape = shape_from_config(CONFIG)
    assert bytes_per_token_at(shape, None) == bytes_per_token_at(shape, "bfloat16") == 32 * 2 * 8 * 128 * 2
    assert bytes_per_token_at(shape, "float32") == 32 * 2 * 8 * 128 * 4
    # a byte a value and a 4-byte scale per token and KV head
    assert bytes_per_token_at(shape, "fp8") == bytes_per_token_at(shape, "int8") == 32 * 2 * 8 * (128 + 4)


def test_80_gib_at_fp8_holds_about_twice_the_tokens_of_bf16_in_one_run(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    trace = ROOT / "fixtures" / "traces" / "concurrent8.jsonl"
    args = ["whatif", str(trace), "--capacity", "80GiB", "--kv-config", str(config), "--json"]
    result = CliRunner().invoke(main, [*args, "--kv-dtype", "bfloat16,fp8"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    capacities = sorted({p["capacity_tokens"] for p in report["points"]})
    # whole blocks of 16: 80 GiB / 131,072 B and / 67,584 B
    assert capacities == [80 * 2**30 // 131072 // 16 * 16, 80 * 2**30 // 67584 // 16 * 16]
    assert 1.93 < capacities[1] / capacities[0] < 1.94
    assert "K/V at fp8: 67,584 B per token" in result.stderr
    # without --kv-config there are no bytes to convert
    refused = CliRunner().invoke(main, ["whatif", str(trace), "--kv-dtype", "fp8"])
    assert refused.exit_code == 2 and "--kv-config" in refused.output


def _bytes_per_token(kv_dtype: str) -> int:
    return bytes_per_token_at(shape_from_config(CONFIG), kv_dtype)


def test_each_row_carries_its_own_precision_and_bytes(tmp_path):
    """80 GiB at bfloat16 and at fp8 are both 80 GiB: each row's bytes are its tokens x its own precision's
    bytes per token, in --json and in the -q table."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    trace = ROOT / "fixtures" / "traces" / "shared_system_8users.jsonl"
    for order in ("bfloat16,fp8", "fp8,bfloat16"):
        args = ["whatif", str(trace), "--capacity", "80GiB", "--kv-config", str(config), "--kv-dtype", order]
        report = json.loads(CliRunner().invoke(main, [*args, "--json", "-q"]).stdout)
        assert {p["kv_dtype"] for p in report["points"]} == {"bfloat16", "fp8"}
        for point in report["points"]:
            assert point["capacity_bytes"] == round(
                point["capacity_tokens"] * _bytes_per_token(point["kv_dtype"])
            )
            # every row is the 80 GiB asked, to within one block
            assert (
                80 * 2**30 - 16 * _bytes_per_token(point["kv_dtype"]) < point["capacity_bytes"] <= 80 * 2**30
            )
        table = CliRunner().invoke(main, [*args, "-q"]).stdout
        rows = [line.split() for line in table.splitlines() if line.strip().endswith("%") and "GiB" in line]
        assert rows and {r[3] for r in rows} == {"bfloat16", "fp8"}
        assert all(r[1:3] == ["80", "GiB"] for r in rows), table


def test_a_token_capacity_at_two_precisions_is_two_rows(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    trace = ROOT / "fixtures" / "traces" / "concurrent8.jsonl"
    args = [
        "whatif",
        str(trace),
        "--capacity",
        "1024",
        "--kv-config",
        str(config),
        "--kv-dtype",
        "bfloat16,int8",
    ]
    report = json.loads(CliRunner().invoke(main, [*args, "--json", "-q", "--method", "simulated"]).stdout)
    assert sorted((p["kv_dtype"], p["capacity_bytes"]) for p in report["points"]) == [
        ("bfloat16", 1024 * _bytes_per_token("bfloat16")),
        ("int8", 1024 * _bytes_per_token("int8")),
    ]
