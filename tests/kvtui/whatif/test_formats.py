"""Qwen-Bailian traces (per-block hash ids, read chained) and the anonymized export (keyed hash ids that keep
every shared prefix and nothing else: the same curve)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kvtui.cli import main
from kvtui.whatif import onepass
from kvtui.whatif.anonymize import export
from kvtui.whatif.curve import simulate_lru
from kvtui.whatif.loaders import detect_format, load
from kvtui.whatif.stream import one_pass_file
from kvtui.whatif.synth import MooncakeLikeConfig, mooncake_like, write_jsonl


def bailian_file(tmp_path, rows):
    lines = [
        json.dumps(
            {
                "chat_id": i,
                "parent_chat_id": -1,
                "timestamp": 0.5 * i,
                "input_length": length,
                "output_length": 4,
                "type": "text",
                "turn": 1,
                "hash_ids": ids,
            }
        )
        for i, (ids, length) in enumerate(rows)
    ]
    path = tmp_path / "qwen_trace_blksz_16.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


ROWS = [
    ([1, 2, 3], 48),
    ([4, 5, 6], 48),
    # 1 is the same block; 5 was seen, but after 4: another block, a hit only when read naively
    ([1, 5, 7], 48),
    ([1, 2, 3, 8], 60),
]


def test_a_bailian_block_hits_only_with_its_whole_prefix(tmp_path):
    path = bailian_file(tmp_path, ROWS)
    assert detect_format(path) == "bailian"
    workload = load(path)
    assert workload.hash_ids and all(r.trace_block_size == 16 for r in workload.requests)
    curve = onepass.lru_curve_of(workload, 16)
    # the independent reading: a block is the tuple of ids up to it
    prefixes = [[tuple(ids[: i + 1]) for i in range(length // 16)] for ids, length in ROWS]
    matchable = [(length - 1) // 16 for _, length in ROWS]
    for capacity in range(0, 14):
        assert curve.hits(capacity) == simulate_lru(prefixes, capacity, matchable=matchable).hit_blocks
    # naive: 1 and 5 of R2, 1 2 3 of R3 (R0 and R1 have their last block unmatchable); chained: 1 of R2 and
    # 1 2 3 of R3
    note = next(n for n in workload.notes if n.startswith("chaining"))
    assert "removes 1 of 5 naive prefix hits" in note and "7.84% of prompt tokens" in note


def test_a_streamed_bailian_file_gives_the_loaded_curve(tmp_path):
    path = bailian_file(tmp_path, ROWS * 3)
    summary, ones = one_pass_file(path, [16], 16, fmt="bailian")
    assert ones[16].curve().block_cum == onepass.lru_curve_of(load(path), 16).block_cum
    assert any(n.startswith("chaining") for n in summary.notes)


def _same_curve(original, path, block):
    replayed = load(path, "mooncake", block)
    a, b = onepass.lru_curve_of(original, block), onepass.lru_curve_of(replayed, block)
    assert a.block_cum == b.block_cum and a.total_blocks == b.total_blocks
    assert original.prompt_tokens == replayed.prompt_tokens


@pytest.mark.parametrize(
    "source,block",
    [
        ("fixtures/traces/shared_system_8users.jsonl", 16),
        ("fixtures/traces/agents_shared_background.jsonl", 16),
        ("fixtures/traces/agents_shared_background.jsonl", 32),
        ("mooncake", 512),
        ("mooncake", 128),
        ("bailian", 16),
    ],
)
def test_the_anonymized_export_gives_the_same_curve(tmp_path, source, block):
    if source == "mooncake":
        records = mooncake_like(2, MooncakeLikeConfig(requests=200, duration_ms=300_000))
        source = str(write_jsonl(records, tmp_path / "m.jsonl"))
    elif source == "bailian":
        source = str(bailian_file(tmp_path, ROWS * 2))
    original = load(source)
    out = tmp_path / "shared.jsonl"
    done = export(original, out, block, b"a secret")
    assert done["requests"] == original.num_requests
    _same_curve(original, out, block)


def test_the_export_keeps_no_token_and_depends_on_the_key(tmp_path):
    original = load("fixtures/traces/shared_system_8users.jsonl")
    export(original, tmp_path / "a.jsonl", 16, b"key one")
    export(original, tmp_path / "b.jsonl", 16, b"key two")
    export(original, tmp_path / "c.jsonl", 16, b"key one")
    a, b, c = (
        [json.loads(x) for x in (tmp_path / n).read_text().splitlines()]
        for n in ("a.jsonl", "b.jsonl", "c.jsonl")
    )
    assert a == c and a != b
    assert set(a[0]) == {"timestamp", "input_length", "output_length", "hash_ids"}
    tokens = {t for r in original.requests for t in r.prompt}
    assert not tokens & {h for r in a for h in r["hash_ids"]}


def test_the_cli_exports_and_asks_for_a_key(tmp_path):
    out = tmp_path / "shared.jsonl"
    args = ["whatif", "fixtures/traces/shared_system_8users.jsonl", "--export-anonymized", str(out)]
    refused = CliRunner().invoke(main, args, env={"KVTUI_ANONYMIZE_KEY": ""})
    assert refused.exit_code != 0 and "secret key" in refused.output
    result = CliRunner().invoke(main, [*args, "--anonymize-key", "k"])
    assert result.exit_code == 0, result.output
    assert "--trace-block-size 16" in result.output and len(out.read_text().splitlines()) == 8
