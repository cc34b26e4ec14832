"""`kvtui info --config`: KV bytes for any model from its config alone (engine/models/kv_budget.py), no weights, no torch."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.models.kv_budget import ConfigError, kv_bytes, load_config, shape_from_config
from kvtui.cli import main

ROOT = Path(__file__).resolve().parents[3]
SEED = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    # the seed notes' example (a Llama-3-8B-like shape)
    "hidden_size": 4096,
    "torch_dtype": "bfloat16",
}
GEMMA3 = {
    "model_type": "gemma3_text",
    "num_hidden_layers": 18,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "hidden_size": 640,
    "sliding_window": 512,
    "sliding_window_pattern": 6,
}


def test_seed_example_is_one_gib_with_mha_four_and_mqa_128_mib():
    shape = shape_from_config(SEED)
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (32, 8, 128)
    assert kv_bytes(shape, [8192], 2) == 2**30
    assert kv_bytes(shape, [8192], 2, kv_heads=32) == 4 * 2**30
    assert kv_bytes(shape, [8192], 2, kv_heads=1) == 128 * 2**20


def test_block_rounding_is_per_sequence():
    shape = shape_from_config(SEED)
    per_token = 2 * 32 * 8 * 128 * 2
    assert kv_bytes(shape, [35], 2) == 35 * per_token
    # 3 blocks: 13 slots unused
    assert kv_bytes(shape, [35], 2, block_size=16) == 48 * per_token
    # each sequence rounds on its own
    assert kv_bytes(shape, [35, 35], 2, block_size=16) == 96 * per_token


def test_window_layers_hold_at_most_w_tokens():
    shape = shape_from_config(GEMMA3)
    assert shape.windows == tuple(None if i % 6 == 5 else 512 for i in range(18))
    per_layer_token = 2 * 1 * 256 * 4
    assert kv_bytes(shape, [8192], 4) == per_layer_token * (3 * 8192 + 15 * 512)
    # shorter than W: every layer holds it all
    assert kv_bytes(shape, [100], 4) == per_layer_token * 18 * 100
    assert kv_bytes(shape, [8192], 4, windows=False) == per_layer_token * 18 * 8192
    explicit = shape_from_config(
        {
            **GEMMA3,
            "sliding_window_pattern": None,
            "layer_types": ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 12,
        }
    )
    assert explicit.windows.count(None) == 1


def test_config_fields_and_defaults():
    # multimodal: its text part
    nested = shape_from_config({"model_type": "gemma3", "text_config": GEMMA3})
    assert nested.layers == 18 and nested.kv_heads == 1
    gpt2 = shape_from_config({"model_type": "gpt2", "n_layer": 12, "n_head": 12, "n_embd": 768})
    assert (gpt2.layers, gpt2.kv_heads, gpt2.head_dim, gpt2.attention_kind()) == (12, 12, 64, "MHA")
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        shape_from_config({"model_type": "bert_like_without_heads"})
    with pytest.raises(ConfigError, match="latent"):
        shape_from_config({**SEED, "kv_lora_rank": 512})


def test_cli_reads_a_config_json_written_here(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SEED))
    result = CliRunner().invoke(
        main, ["info", "--config", str(path), "--tokens", "8192", "--dtype", "bfloat16"]
    )
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.output.splitlines() if line[:3] in ("MHA", "GQA", "MQA")}
    assert "1 GiB" in rows["GQA"] and "this model" in rows["GQA"]
    assert "4 GiB" in rows["MHA"] and "128 MiB" in rows["MQA"]
    # a directory works too, the dtype comes from the config when not typed, and rounding is reported
    result = CliRunner().invoke(main, ["info", "--config", str(tmp_path), "--tokens", "35,100"])
    assert result.exit_code == 0 and "bfloat16" in result.output
    assert "10 blocks of 16" in result.output and "25 slots reserved but unused" in result.output


@pytest.mark.parametrize("kv_dtype", ["fp8", "int8"])
def test_cli_counts_quantized_rows_with_their_scales(tmp_path, kv_dtype):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SEED))
    result = CliRunner().invoke(
        main,
        ["info", "--config", str(path), "--tokens", "8192", "--dtype", "bfloat16", "--kv-dtype", kv_dtype],
    )
    assert result.exit_code == 0, result.output
    # 32 layers x 2 x 8 KV heads x (128 values of 1 B + a 4 B scale) x 8,192 tokens = 528 MiB (bf16: 1 GiB)
    rows = {line.split()[0]: line for line in result.output.splitlines() if line[:3] in ("MHA", "GQA", "MQA")}
    assert f"{32 * 2 * 8 * 132 * 8192 / 2**20:.0f} MiB" == "528 MiB" and "528 MiB" in rows["GQA"]
    assert "132 B a row (bfloat16: 256 B); 1.94x the tokens" in result.output


def test_cli_errors_are_one_line(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(main, ["info", "--config", str(tmp_path / "nope.json")])
    assert missing.exit_code != 0 and "no such file" in missing.output and "Traceback" not in missing.output
    (tmp_path / "bad.json").write_text("{not json")
    bad = runner.invoke(main, ["info", "--config", str(tmp_path / "bad.json")])
    assert bad.exit_code != 0 and "not a readable JSON config" in bad.output
    tokens = runner.invoke(main, ["info", "--config", str(tmp_path / "bad.json"), "--tokens", "many"])
    assert tokens.exit_code != 0 and "--tokens" in tokens.output
    with pytest.raises(ConfigError, match="no config.json"):
        load_config(str(tmp_path))


def test_info_from_a_config_needs_no_torch(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SEED))
    script = f"""
import importlib.abc, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ImportError(name + " is blocked")
sys.meta_path.insert(0, NoTorch())
from click.testing import CliRunner
from kvtui.cli import main
result = CliRunner().invoke(main, ["info", "--config", {str(path)!r}, "--dtype", "bfloat16"], catch_exceptions=False)
assert result.exit_code == 0 and "1 GiB" in result.output, result.output
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
