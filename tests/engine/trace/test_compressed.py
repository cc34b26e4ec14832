"""Opening a file plain or zstd-compressed (engine/trace/compressed.py): found by its first bytes, read forward a
buffer at a time, and the same bytes, lines, trace events and workload as the plain file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine.trace.compressed import (
    ASSUMED_RATIO,
    CompressedFileError,
    decompressed_size,
    is_zstd,
    missing_package,
    open_binary,
    open_text,
    read_position,
)
from engine.trace.opening import TraceUnusable, open_trace
from engine.trace.reader import read_header, read_trace
from engine.workload import WorkloadError, load_workload

zstandard = pytest.importorskip(
    "zstandard", reason="the zstd extra is not installed: pip install 'kvtui[zstd]'"
)

ROOT = Path(__file__).resolve().parents[3]
TRACE = ROOT / "fixtures" / "traces" / "shared_system_8users.jsonl"
LINES = b"".join(b'{"line": %d, "text": "caf\xc3\xa9"}\n' % i for i in range(20_000))
SKIPPABLE = b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"note"


def compressed(data: bytes, frames: int = 1) -> bytes:
    """`data` as zstd frames, each declaring its size (as `zstd FILE` writes them)."""
    step = -(-len(data) // frames)
    return b"".join(
        zstandard.ZstdCompressor().compress(data[i : i + step]) for i in range(0, len(data), step)
    )


def test_a_zstd_file_is_known_by_its_first_bytes_whatever_its_name(tmp_path):
    (tmp_path / "data.bin").write_bytes(compressed(LINES))
    (tmp_path / "plain.zst").write_bytes(LINES)
    (tmp_path / "skip.bin").write_bytes(SKIPPABLE + compressed(LINES))
    assert is_zstd(tmp_path / "data.bin") and is_zstd(tmp_path / "skip.bin")
    assert not is_zstd(tmp_path / "plain.zst")
    for name in ("data.bin", "plain.zst", "skip.bin"):
        with open_binary(tmp_path / name) as handle:
            assert handle.read() == LINES, name


def test_frames_one_after_another_and_skippable_ones_read_as_one_stream(tmp_path):
    path = tmp_path / "frames.zst"
    path.write_bytes(compressed(LINES, frames=3) + SKIPPABLE + compressed(b"last\n"))
    with open_text(path) as handle:
        lines = list(handle)
    assert "".join(lines).encode() == LINES + b"last\n" and lines[1] == '{"line": 1, "text": "café"}\n'


def test_the_position_counts_bytes_on_disk_and_ends_at_the_file_size(tmp_path):
    path = tmp_path / "m.jsonl.zst"
    path.write_bytes(compressed(LINES))
    size = path.stat().st_size
    seen = []
    with open_binary(path) as handle:
        for number, _ in enumerate(handle):
            if not number % 1000:
                seen.append(read_position(handle))
        assert read_position(handle) == size
    assert seen == sorted(seen) and seen[-1] <= size < len(LINES)
    # a plain file: the bytes read, as before
    (tmp_path / "plain").write_bytes(LINES)
    with open_binary(tmp_path / "plain") as handle:
        handle.readline()
        assert read_position(handle) == len(LINES.split(b"\n")[0]) + 1


def test_a_cut_short_or_damaged_file_is_an_error_not_a_shorter_workload(tmp_path):
    data = compressed(LINES)
    (tmp_path / "cut.zst").write_bytes(data[: len(data) // 2])
    with pytest.raises(CompressedFileError, match="ends inside a frame at byte .*cut short"):
        with open_binary(tmp_path / "cut.zst") as handle:
            handle.read()
    (tmp_path / "tail.zst").write_bytes(data + b"not zstd")
    with pytest.raises(CompressedFileError, match="tail.zst: not a readable zstd stream near byte"):
        with open_text(tmp_path / "tail.zst") as handle:
            list(handle)


def test_a_stretch_that_compresses_very_well_comes_out_a_buffer_at_a_time(tmp_path):
    import tracemalloc

    path = tmp_path / "zeros.zst"
    with open(path, "wb") as out, zstandard.ZstdCompressor().stream_writer(out) as writer:
        for _ in range(256):
            writer.write(bytes(1 << 20))
    # 256 MiB in a few kB: fed whole, one call would give it all back at once
    assert path.stat().st_size < 1 << 16
    tracemalloc.start()
    try:
        with open_binary(path) as handle:
            total = sum(len(block) for block in iter(lambda: handle.read(1 << 20), b""))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == 256 << 20 and peak < 32 << 20, peak


def test_the_decompressed_size_is_what_the_frame_declares_or_an_estimate(tmp_path):
    (tmp_path / "declared.zst").write_bytes(compressed(LINES))
    assert decompressed_size(tmp_path / "declared.zst") == len(LINES)
    # compressed as a stream (from a pipe): no size in the frame
    with open(tmp_path / "stream.zst", "wb") as out, zstandard.ZstdCompressor().stream_writer(out) as writer:
        writer.write(LINES)
    size = (tmp_path / "stream.zst").stat().st_size
    assert decompressed_size(tmp_path / "stream.zst") == ASSUMED_RATIO * size
    (tmp_path / "plain").write_bytes(LINES)
    assert decompressed_size(tmp_path / "plain") == len(LINES)


def test_without_zstandard_a_zstd_file_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)
    (tmp_path / "m.zst").write_bytes(compressed(LINES))
    (tmp_path / "plain").write_bytes(LINES)
    said = f"{tmp_path / 'm.zst'}: zstd-compressed, and reading it needs the zstandard package: "
    assert missing_package(tmp_path / "m.zst") == said + "pip install 'kvtui[zstd]'"
    with pytest.raises(CompressedFileError, match="pip install 'kvtui\\[zstd\\]'"):
        open_binary(tmp_path / "m.zst")
    # a plain file, or one that is not there, is not its business
    assert missing_package(tmp_path / "plain") is None and missing_package(tmp_path / "nope") is None
    with open_binary(tmp_path / "plain") as handle:
        assert handle.read() == LINES


def test_a_compressed_trace_reads_as_its_plain_file_and_its_progress_ends_at_its_size(tmp_path):
    path = tmp_path / "trace.jsonl.zst"
    path.write_bytes(compressed(TRACE.read_bytes(), frames=2))
    calls = []
    plain, packed = read_trace(TRACE), read_trace(path, progress=lambda *call: calls.append(call))
    assert packed.error is None and packed.header == plain.header and packed.events == plain.events
    assert calls[-1][:2] == (path.stat().st_size, path.stat().st_size)
    assert read_header(path) == read_header(TRACE)


def test_a_cut_short_compressed_trace_is_the_error_of_the_file(tmp_path):
    data = compressed(TRACE.read_bytes())
    path = tmp_path / "cut.jsonl.zst"
    path.write_bytes(data[: len(data) - 20])
    loaded = read_trace(path)
    assert loaded.error.line == 0 and "ends inside a frame" in loaded.error.message
    with pytest.raises(TraceUnusable, match=r"^.*cut.jsonl.zst: the zstd stream ends inside a frame"):
        open_trace(path)


def test_a_compressed_workload_json_loads_as_its_plain_file(tmp_path):
    source = ROOT / "fixtures" / "workloads" / "chat.json"
    path = tmp_path / "chat.json.zst"
    path.write_bytes(compressed(source.read_bytes()))
    assert load_workload(path) == load_workload(source)
    path.write_bytes(compressed(source.read_bytes())[:-10])
    with pytest.raises(WorkloadError, match="ends inside a frame"):
        load_workload(path)
