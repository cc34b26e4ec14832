"""kvtui's binary block trace: a hash-id workload (Mooncake's or Qwen-Bailian's fields) in fixed-width
columns, read a chunk at a time straight into numpy, never whole in memory.

    python -m kvtui.whatif.block_trace trace.jsonl trace.kvblk [--trace-block-size 512]   convert
    kvtui whatif trace.kvblk --method one-pass --capacity 1M,10M

The layout (little-endian) is FILE_HEADER, then chunks to the end of the file, each CHUNK_HEADER and then
its COLUMNS one after another (docs/trace-format.md shows these tables). The file is read forward only, a
chunk after the other, so a zstd-compressed one (engine/trace/compressed.py) reads as it is.
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from engine.trace.compressed import (
    CompressedFileError,
    missing_package,
    open_binary,
    open_text,
    read_position,
)
from kvtui.whatif.requests import MAX_HASH_ID, SimRequest, Workload

MAGIC = b"KVBLOCK1"
HEADER = struct.Struct("<8sII")
CHUNK = struct.Struct("<QQ")
# (name, what it holds, its meaning): the page's tables come from these
FILE_HEADER = (
    ("magic", "8 bytes", "`KVBLOCK1`"),
    ("block_size", "u32", "tokens per hash id (512 for Mooncake, 16 for Qwen-Bailian)"),
    ("reserved", "u32", "0"),
)
CHUNK_HEADER = (
    ("requests", "u64", "n, the requests in the chunk"),
    ("references", "u64", "m, their hash ids together (the sum of block_count)"),
)
COLUMNS = (
    ("timestamp", "f64[n]", "arrival in milliseconds from the start, never decreasing"),
    (
        "input_length",
        "u32[n]",
        "prompt tokens: more than (block_count - 1) x block_size, at most block_count x it",
    ),
    ("output_length", "u32[n]", "generated tokens"),
    ("block_count", "u32[n]", "hash ids of the request"),
    ("hashes", "u64[m]", f"the hash ids, request after request, each at most {MAX_HASH_ID:,}"),
)
# the columns before the hashes, and their bytes each (numpy is imported only to read or write them)
DTYPES = ("<f8", "<u4", "<u4", "<u4")
ITEM_BYTES = (8, 4, 4, 4)
CHUNK_REQUESTS = 1 << 16


@dataclass
class BlockChunk:
    """One chunk's columns, numpy arrays over the chunk's bytes; `position`: the bytes of the file on disk read
    so far (compressed bytes for a zstd file), for a progress bar."""

    timestamps: object
    input_lengths: object
    output_lengths: object
    counts: object
    hashes: object
    position: int = 0

    @property
    def starts(self):
        import numpy as np

        return np.concatenate([[0], np.cumsum(self.counts, dtype=np.int64)])


def is_block_trace(path: str | Path) -> bool:
    with open_binary(path) as handle:
        return handle.read(len(MAGIC)) == MAGIC


def read_header(handle, path) -> int:
    """The block size, after checking the magic."""
    raw = handle.read(HEADER.size)
    if len(raw) < HEADER.size or raw[:8] != MAGIC:
        raise ValueError(f"{path}: not a kvtui block trace (it starts with {MAGIC.decode()})")
    return HEADER.unpack(raw)[1]


def iter_chunks(path: str | Path, problems: list[str] | None = None) -> Iterator[BlockChunk]:
    """The file's chunks, each checked; a chunk cut short at the end (a writer that stopped) is left out and
    named in `problems`."""
    import numpy as np

    with open_binary(path) as handle:
        block = read_header(handle, path)
        number = 0
        while raw := handle.read(CHUNK.size):
            number += 1
            n, m = CHUNK.unpack(raw) if len(raw) == CHUNK.size else (0, 0)
            size = n * (8 + 4 + 4 + 4) + m * 8
            body = handle.read(size) if len(raw) == CHUNK.size else b""
            if len(raw) < CHUNK.size or len(body) < size:
                if problems is not None:
                    problems.append(f"chunk {number}: cut short at the end of the file; left out")
                return
            columns, offset = [], 0
            for dtype, width in zip(DTYPES, ITEM_BYTES):
                columns.append(np.frombuffer(body, dtype=dtype, count=n, offset=offset))
                offset += n * width
            hashes = np.frombuffer(body, dtype="<u8", count=m, offset=offset)
            chunk = BlockChunk(*columns, hashes, read_position(handle))
            _check(chunk, block, number, path)
            yield chunk


def _check(chunk: BlockChunk, block: int, number: int, path) -> None:
    import numpy as np

    counts, lengths = chunk.counts.astype(np.int64), chunk.input_lengths.astype(np.int64)
    bad = np.flatnonzero((counts < 1) | (lengths <= (counts - 1) * block) | (lengths > counts * block))
    where = f"{path}, chunk {number}"
    if int(counts.sum()) != len(chunk.hashes):
        raise ValueError(
            f"{where}: block_count adds up to {int(counts.sum())}, not its {len(chunk.hashes)} ids"
        )
    if len(bad):
        i = int(bad[0])
        raise ValueError(
            f"{where}, request {i + 1}: input_length {int(lengths[i])} does not fit {int(counts[i])} hash ids "
            f"of {block} tokens"
        )
    if len(chunk.hashes) and int(chunk.hashes.max()) > MAX_HASH_ID:
        raise ValueError(f"{where}: a hash id above {MAX_HASH_ID:,}")


def block_size_of(path: str | Path) -> int:
    with open_binary(path) as handle:
        return read_header(handle, path)


class BlockTraceWriter:
    """Requests a chunk at a time: `add` one, or `add_chunk` columns already made."""

    def __init__(self, path: str | Path, block_size: int):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(self.path, "wb")
        self.handle.write(HEADER.pack(MAGIC, block_size, 0))
        self.requests = self.references = 0
        self._rows: list[tuple[float, int, int, int]] = []
        self._hashes: list[int] = []

    def add(self, timestamp_ms: float, input_length: int, output_length: int, hashes) -> None:
        self._rows.append((timestamp_ms, input_length, output_length, len(hashes)))
        self._hashes.extend(hashes)
        if len(self._rows) >= CHUNK_REQUESTS:
            self.flush()

    def flush(self) -> None:
        if self._rows:
            columns = list(zip(*self._rows))
            self.add_chunk(*columns, self._hashes)
            self._rows, self._hashes = [], []

    def add_chunk(self, timestamps, input_lengths, output_lengths, counts, hashes) -> None:
        import numpy as np

        arrays = [
            np.asarray(c, dtype=d)
            for c, d in zip((timestamps, input_lengths, output_lengths, counts), DTYPES)
        ]
        ids = np.asarray(hashes, dtype="<u8")
        self.handle.write(CHUNK.pack(len(arrays[0]), len(ids)))
        for array in (*arrays, ids):
            self.handle.write(array.tobytes())
        self.requests += len(arrays[0])
        self.references += len(ids)

    def close(self) -> None:
        self.flush()
        self.handle.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load_blocks(path: str | Path) -> Workload:
    """The whole file as requests (for the simulation; the one pass streams it instead: stream.py)."""
    path = Path(path)
    block = block_size_of(path)
    problems: list[str] = []
    requests = []
    for chunk in iter_chunks(path, problems):
        starts = chunk.starts.tolist()
        for i, (ts, n_in, n_out) in enumerate(
            zip(chunk.timestamps.tolist(), chunk.input_lengths.tolist(), chunk.output_lengths.tolist())
        ):
            ids = chunk.hashes[starts[i] : starts[i + 1]].tolist()
            rid = f"b{len(requests) + 1}"
            requests.append(
                SimRequest(
                    rid,
                    ts / 1000.0,
                    None,
                    None,
                    max(n_out, 1),
                    None,
                    hash_ids=ids,
                    input_length=n_in,
                    trace_block_size=block,
                )
            )
    if not requests:
        raise ValueError(f"{path}: no requests in it" + (f" ({problems[0]})" if problems else ""))
    requests.sort(key=lambda r: r.arrival)
    t0 = requests[0].arrival
    for r in requests:
        r.arrival -= t0
    notes = [f"each hash id is {block} tokens; generated tokens are never cached (kvtui block trace)"]
    return Workload(path.name, "blocks", requests, problems, notes)


def convert(source: str | Path, target: str | Path, fmt: str, trace_block_size: int) -> tuple[int, int, list]:
    """A Mooncake or Qwen-Bailian JSONL file as a block trace, a line at a time: (requests, ids, problems)."""
    from kvtui.whatif import bailian, mooncake

    reader = bailian.iter_bailian if fmt == "bailian" else mooncake.iter_mooncake
    problems: list[str] = []
    with (
        open_text(source) as handle,
        BlockTraceWriter(target, trace_block_size) as writer,
    ):
        for request in reader(handle, trace_block_size, problems):
            writer.add(
                request.arrival * 1000.0, request.input_length, request.num_output_tokens, request.hash_ids
            )
    return writer.requests, writer.references, problems


def _jsonl_format(path) -> str | None:
    """mooncake or bailian from the first non-empty line; None when it is neither."""
    import json

    from kvtui.whatif.bailian import looks_like_bailian
    from kvtui.whatif.mooncake import looks_like_mooncake

    with open_text(path) as handle:
        first = next((line for line in handle if line.strip()), "")
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        return None
    if isinstance(obj, dict) and looks_like_bailian(obj):
        return "bailian"
    return "mooncake" if isinstance(obj, dict) and looks_like_mooncake(obj) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Convert a Mooncake or Qwen-Bailian JSONL trace to a block trace."
    )
    parser.add_argument("source")
    parser.add_argument("target")
    parser.add_argument("--format", dest="fmt", choices=("mooncake", "bailian"), default=None)
    parser.add_argument(
        "--trace-block-size", type=int, default=None, help="tokens per hash id [512; Bailian 16]"
    )
    args = parser.parse_args(argv)
    if not Path(args.source).is_file():
        print(f"{args.source}: no such file; give a Mooncake or Qwen-Bailian JSONL trace", file=sys.stderr)
        return 2
    if missing := missing_package(args.source):
        print(missing, file=sys.stderr)
        return 2
    try:
        return _convert(args)
    except CompressedFileError as exc:
        print(exc, file=sys.stderr)
        return 1


def _convert(args) -> int:
    fmt = args.fmt or _jsonl_format(args.source)
    if fmt is None:
        print(
            f"{args.source}: line 1 is not a Mooncake or Qwen-Bailian record; give --format", file=sys.stderr
        )
        return 2
    block = args.trace_block_size or (16 if fmt == "bailian" else 512)
    if block < 1:
        print("--trace-block-size must be at least 1", file=sys.stderr)
        return 2
    requests, references, problems = convert(args.source, args.target, fmt, block)
    for problem in problems[:5]:
        print(f"skipped {problem}", file=sys.stderr)
    print(f"{args.target}: {requests:,} requests, {references:,} hash ids of {block} tokens")
    return 0 if requests else 1


if __name__ == "__main__":
    raise SystemExit(main())
