"""Opening a trace or workload file, plain or zstd-compressed: every reader of one opens it here (kvtui traces,
proxy logs, Mooncake and Qwen-Bailian JSONL, kvtui's block traces, workload JSON).

    with open_binary(path) as handle: ...     its bytes, read forward
    with open_text(path) as handle: ...       its lines, UTF-8 (a bad byte becomes U+FFFD)
    read_position(handle)                     bytes of the file on disk read so far: a progress bar's share
    decompressing(handle)                     whether those are compressed bytes

A zstd file is known by its first four bytes (a zstd frame, or a skippable frame), whatever its name, and is
decompressed as it is read, a buffer at a time: never whole in memory or on disk. Its frames are read one after
another; a file that ends inside a frame (a download cut short) is an error, not a shorter workload. Reading one
needs the zstandard package (pip install 'kvtui[zstd]'); without it, opening one raises CompressedFileError,
whose str() is the one line to print, and `missing_package(path)` says so before any work starts.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
INSTALL = "pip install 'kvtui[zstd]'"
# compressed bytes read from disk at a time; the least fed to the decompressor at once, and the most it may
# give back before the pieces get smaller; the decompressed buffer a reader reads from
INPUT_BYTES = 1 << 15
PIECE_BYTES = 64
OUTPUT_BYTES = 1 << 18
BUFFER_BYTES = 1 << 20
# a zstd file that does not say its decompressed size is taken to be this many times its own (an estimate,
# used only to size a sampled pass's first sketch: sampled.py)
ASSUMED_RATIO = 4
# zstd --long=31 writes frames with a 2 GiB window; the decompressor refuses over 128 MiB unless told
MAX_WINDOW = 1 << 31

__all__ = [
    "INSTALL",
    "CompressedFileError",
    "decompressed_size",
    "decompressing",
    "is_zstd",
    "missing_package",
    "open_binary",
    "open_text",
    "read_position",
]


class CompressedFileError(ValueError):
    """A zstd file that cannot be read: the zstandard package is missing, or the stream is damaged or cut
    short. `reason` says what, without the path; str() is the one line to print."""

    def __init__(self, path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def _zstd_head(head: bytes) -> bool:
    # a zstd frame, or a skippable frame (magic 0x184D2A50 to 0x184D2A5F) before one
    return head[:4] == ZSTD_MAGIC or (len(head) >= 4 and head[1:4] == b"\x2a\x4d\x18" and head[0] >> 4 == 5)


def is_zstd(path: str | Path) -> bool:
    """Whether the file starts as a zstd stream does."""
    with open(path, "rb") as handle:
        return _zstd_head(handle.read(4))


def _zstandard(path):
    try:
        import zstandard
    except ImportError:
        raise CompressedFileError(
            path, f"zstd-compressed, and reading it needs the zstandard package: {INSTALL}"
        ) from None
    return zstandard


def missing_package(path: str | Path) -> str | None:
    """The one line to print when the file is zstd-compressed and zstandard is not installed; else None
    (a file that cannot be opened is the reader's to report)."""
    try:
        if is_zstd(path):
            _zstandard(path)
    except OSError:
        return None
    except CompressedFileError as exc:
        return str(exc)
    return None


def open_binary(path: str | Path):
    """The file's bytes (decompressed where it is zstd), to read forward; a context manager."""
    source = open(path, "rb")
    try:
        if not _zstd_head(source.peek(4)[:4]):
            return source
        stream = _ZstdStream(source, path, _zstandard(path))
    except BaseException:
        source.close()
        raise
    return io.BufferedReader(stream, BUFFER_BYTES)


def open_text(path: str | Path, errors: str = "replace"):
    """The file's lines as UTF-8 text (decompressed where it is zstd), as open(path, encoding="utf-8") reads."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", errors=errors)


def decompressing(handle) -> bool:
    """Whether a handle from open_binary decompresses a zstd file."""
    return isinstance(getattr(handle, "raw", None), _ZstdStream)


def read_position(handle) -> int:
    """How far into the file on disk a binary handle from open_binary has read: compressed bytes for zstd."""
    raw = getattr(handle, "raw", None)
    if isinstance(raw, _ZstdStream):
        return raw.source.tell()
    return handle.tell()


def decompressed_size(path: str | Path) -> int:
    """The bytes a reader gets from the file: its size, or for zstd the size its first frame declares (zstd
    writes it when it compresses a file), else ASSUMED_RATIO times the compressed size."""
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        head = handle.read(18)
    if not _zstd_head(head):
        return size
    declared = -1
    if head[:4] == ZSTD_MAGIC:
        zstandard = _zstandard(path)
        try:
            declared = zstandard.frame_content_size(head)
        except zstandard.ZstdError:
            # a frame header that does not parse: the reader says so when it gets there
            pass
    return declared if declared >= 0 else ASSUMED_RATIO * size


class _ZstdStream(io.RawIOBase):
    """The decompressed bytes of a zstd file, read forward: its frames one after another (skippable frames
    skipped by the decompressor). Damaged data, or an end inside a frame, raises CompressedFileError.

    The decompressor gives back everything its input holds, and a few compressed bytes can hold megabytes (a
    run of zeros): the input goes in by pieces, from PIECE_BYTES up to INPUT_BYTES, halved while the output of
    one is over OUTPUT_BYTES, so no more than about that is ever out at once."""

    def __init__(self, source, path, zstandard):
        self.source, self.path, self.zstandard = source, path, zstandard
        self._context = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW)
        self._frame = self._context.decompressobj()
        # whether the frame being read has had any input yet (at the end of the file it must have none)
        self._begun = False
        self._input = memoryview(b"")
        self._piece = PIECE_BYTES
        self._out = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._out:
            if not self._input:
                self._input = memoryview(self.source.read(INPUT_BYTES))
                if not self._input:
                    return self._end()
            piece, self._input = self._input[: self._piece], self._input[self._piece :]
            self._out = memoryview(self._decompress(piece))
            if len(self._out) > OUTPUT_BYTES:
                self._piece = max(self._piece // 2, PIECE_BYTES)
            elif len(self._out) < OUTPUT_BYTES // 4:
                self._piece = min(self._piece * 2, INPUT_BYTES)
        n = min(len(buffer), len(self._out))
        buffer[:n] = self._out[:n]
        self._out = self._out[n:]
        return n

    def _end(self) -> int:
        if self._begun:
            raise CompressedFileError(
                self.path,
                f"the zstd stream ends inside a frame at byte {self.source.tell():,} (the file is cut short: "
                "download or compress it again)",
            )
        return 0

    def _decompress(self, piece) -> bytes:
        try:
            out = self._frame.decompress(piece)
        except self.zstandard.ZstdError as exc:
            raise CompressedFileError(
                self.path, f"not a readable zstd stream near byte {self.source.tell():,} of the file ({exc})"
            ) from None
        self._begun = True
        if self._frame.eof:
            # a frame ended: what follows it in the piece is the next frame's
            self._input = memoryview(self._frame.unused_data + bytes(self._input))
            self._frame = self._context.decompressobj()
            self._begun = False
        return out

    def close(self) -> None:
        if not self.closed:
            self.source.close()
        super().close()
