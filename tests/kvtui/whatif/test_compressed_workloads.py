"""`kvtui whatif` on zstd-compressed workloads (engine/trace/compressed.py): a compressed Mooncake JSONL, block
trace, kvtui trace or proxy log gives the same figures as its plain file, streamed or loaded, and without the
zstandard package the command says what to install on one line before it does anything."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.trace.compressed import ZSTD_MAGIC
from kvtui.cli import main
from kvtui.whatif.block_trace import main as convert_main
from kvtui.whatif.loaders import detect_format
from kvtui.whatif.synth import MooncakeLikeConfig, mooncake_like, write_jsonl
from tests.helpers.bad_input import assert_one_line_error

ROOT = Path(__file__).resolve().parents[3]
TRACE = ROOT / "fixtures" / "traces" / "shared_system_8users.jsonl"
ONE_PASS = ["--method", "one-pass", "--capacity", "100k,1M,10M"]
BOTH = ["--capacity", "100k,1M"]


def _zstandard():
    return pytest.importorskip(
        "zstandard", reason="the zstd extra is not installed: pip install 'kvtui[zstd]'"
    )


def compressed(path: Path, name: str | None = None, frames: int = 1) -> Path:
    """The file as zstd frames beside it (name: PATH.zst)."""
    data = path.read_bytes()
    step = -(-len(data) // frames)
    compressor = _zstandard().ZstdCompressor()
    target = path.with_name(name or path.name + ".zst")
    target.write_bytes(b"".join(compressor.compress(data[i : i + step]) for i in range(0, len(data), step)))
    return target


def figures(path: Path, *args: str) -> dict:
    """The report of `kvtui whatif PATH ARGS --json`, less the file's name and the time each point took."""
    result = CliRunner().invoke(main, ["whatif", str(path), *args, "--json", "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report.pop("workload") == path.name
    for point in report["points"]:
        point.pop("wall_seconds", None)
    return report


@pytest.fixture
def mooncake(tmp_path) -> Path:
    records = mooncake_like(5, MooncakeLikeConfig(requests=200, duration_ms=600_000))
    return write_jsonl(records, tmp_path / "m.jsonl")


def test_a_compressed_mooncake_jsonl_gives_the_figures_of_its_plain_file(mooncake):
    packed = compressed(mooncake, frames=3)
    assert detect_format(packed) == "mooncake"
    for args in (ONE_PASS, BOTH):
        plain = figures(mooncake, *args)
        assert plain["points"] and plain["ceiling"]["token_hit_rate"] > 0
        assert figures(packed, *args) == plain, args


def test_a_compressed_block_trace_gives_the_figures_of_its_plain_file(mooncake, tmp_path, capsys):
    # the converter reads the compressed JSONL as well
    assert convert_main([str(compressed(mooncake)), str(tmp_path / "m.kvblk")]) == 0
    assert "200 requests" in capsys.readouterr().out
    blocks = tmp_path / "m.kvblk"
    packed = compressed(blocks)
    assert detect_format(packed) == "blocks"
    for args in (
        ONE_PASS,
        BOTH,
        [*ONE_PASS, "--block-size", "128,1024"],
        [*ONE_PASS, "--requests", "20:150"],
    ):
        assert figures(packed, *args) == figures(blocks, *args), args
    # a sampled pass sizes its first sketch from the size the frame declares: the same estimate
    sampled = [*ONE_PASS, "--sample", "0.5"]
    assert figures(packed, *sampled) == figures(blocks, *sampled)


def test_a_compressed_trace_and_proxy_log_give_the_figures_of_their_plain_files(tmp_path):
    log = tmp_path / "requests.jsonl"
    lines = [
        {"arrival": 0.5 * i, "prompt_token_ids": [1] * 64 + [i % 3] * 32, "output_token_ids": [7, 8]}
        for i in range(12)
    ]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    trace = tmp_path / TRACE.name
    trace.write_bytes(TRACE.read_bytes())
    for plain, fmt in ((trace, "trace"), (log, "proxy-log")):
        packed = compressed(plain)
        assert detect_format(packed) == fmt
        report = figures(packed, "--capacity", "256,1k")
        assert report["points"] and report == figures(plain, "--capacity", "256,1k"), fmt


def test_a_compressed_file_is_known_by_its_bytes_not_its_name(mooncake):
    packed = compressed(mooncake, name="workload.bin")
    assert figures(packed, *ONE_PASS) == figures(mooncake, *ONE_PASS)


def test_a_cut_short_compressed_file_is_one_line(mooncake):
    packed = compressed(mooncake)
    packed.write_bytes(packed.read_bytes()[:-100])
    for args in (ONE_PASS, BOTH):
        result = CliRunner().invoke(main, ["whatif", str(packed), *args])
        assert_one_line_error(result, "m.jsonl.zst: the zstd stream ends inside a frame")


@pytest.mark.parametrize(
    "args",
    [[], ["--format", "mooncake", "--method", "one-pass"], ["--format", "blocks"], ["--as-recorded"]],
)
def test_without_zstandard_a_compressed_workload_says_what_to_install(tmp_path, monkeypatch, args):
    # the import fails as it does where the package is not installed
    monkeypatch.setitem(sys.modules, "zstandard", None)
    path = tmp_path / "trace.jsonl.zst"
    path.write_bytes(ZSTD_MAGIC + b"\x20\x00" * 8)
    result = CliRunner().invoke(main, ["whatif", str(path), *args])
    assert_one_line_error(result, "zstd-compressed, and reading it needs the zstandard package")
    assert result.output.count("pip install 'kvtui[zstd]'") == 1 and result.exit_code == 1
