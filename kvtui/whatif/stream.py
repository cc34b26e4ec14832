"""A hash-id trace (Mooncake, Qwen-Bailian) read a line at a time into the one-pass curves, never whole in
memory: a million-request file becomes its curves (onepass.py) and a summary of what was read.

    summary, curves = one_pass_file("trace.jsonl", [512], 512, progress=print_progress)
    curves[512].curve().hit_rate(4096)

The file must be in arrival order, as released traces are (a request is judged against the cache the
earlier ones left); a line that goes back in time stops the stream (`OutOfOrder`) and the caller reads the
file whole and sorts it instead.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engine.trace.compressed import decompressed_size, open_binary, read_position
from kvtui.whatif.onepass import OnePass
from kvtui.whatif.requests import OutOfOrder

STREAMED_FORMATS = ("mooncake", "bailian", "blocks")
__all__ = ["OutOfOrder", "STREAMED_FORMATS", "FileProgress", "StreamedWorkload", "one_pass_file"]


@dataclass
class StreamedWorkload:
    """What the report says of a workload it did not keep: the same fields as requests.Workload's."""

    name: str
    format: str
    num_requests: int = 0
    prompt_tokens: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    hash_ids: bool = True


class FileProgress:
    """A progress bar on stderr every `every` seconds: how far into the file, requests and block references
    read, references a second, and this process's memory (resident now)."""

    def __init__(self, label: str, size: int, enabled: bool = True, every: float = 2.0):
        self.label, self.size, self.enabled, self.every = label, size, enabled, every
        self.started = self._last = time.perf_counter()
        self.references = 0

    def restart(self, label: str) -> None:
        """A second pass over the same file: its own label, rate and clock."""
        self.label = label
        self.started = self._last = time.perf_counter()
        self.references = 0

    def __call__(self, requests: int, position: int) -> None:
        now = time.perf_counter()
        if self.enabled and now - self._last >= self.every:
            self._last = now
            print(self.line(requests, position, now), file=sys.stderr, flush=True)

    def line(self, requests: int, position: int, now: float) -> str:
        share = min(position / self.size, 1.0) if self.size else 1.0
        filled = int(20 * share)
        rate = self.references / max(now - self.started, 1e-9)
        return (
            f"  {self.label}: [{'#' * filled}{'.' * (20 - filled)}] {100 * share:.0f}%  {requests:,} requests, "
            f"{self.references:,} block references, {rate / 1e6:.2f}M/s, {resident_bytes() / 2**30:.2f} GiB, "
            f"{now - self.started:.0f} s"
        )


def resident_bytes() -> int:
    """This process's resident memory now (its peak where /proc is missing)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _lines(handle, progress: Callable[[int, int], None] | None, counter: list[int]) -> Iterator[bytes]:
    for number, line in enumerate(handle):
        if progress is not None and not number % 4096:
            progress(counter[0], read_position(handle))
        yield line


def one_pass_file(
    path: str | Path,
    block_sizes: list[int],
    trace_block_size: int,
    start: int | None = None,
    stop: int | None = None,
    keep_chains: bool = True,
    progress: Callable[[int, int], None] | None = None,
    fmt: str = "mooncake",
    sample: float | None = None,
    seed: int = 0,
    chain_limit: int | None = None,
    part: int = 0,
    parts: int = 1,
) -> tuple[StreamedWorkload, dict[int, OnePass]]:
    """Stream the file's requests [start:stop] (good lines, arrival order) into one OnePass per block size;
    `sample`: a SHARDS rate (sampled.py); `chain_limit`, `part` and `parts`: OnePass's."""
    from kvtui.whatif import bailian, mooncake

    path = Path(path)
    if fmt == "blocks":
        from kvtui.whatif.block_stream import one_pass_blocks

        curves = {
            bs: OnePass(bs, keep_chains, sample, seed, chain_limit=chain_limit, part=part, parts=parts)
            for bs in block_sizes
        }
        summary = StreamedWorkload(path.name, fmt)
        one_pass_blocks(path, curves, summary, start, stop, progress)
        return summary, curves
    if fmt == "bailian":
        reader, notes = bailian.iter_bailian, bailian.notes_for(trace_block_size)
        chaining = bailian.ChainingCount(trace_block_size)
    else:
        reader, notes, chaining = mooncake.iter_mooncake, mooncake.notes_for(trace_block_size), None
    curves = {
        bs: OnePass(bs, keep_chains, sample, seed, chain_limit=chain_limit, part=part, parts=parts)
        for bs in block_sizes
    }
    sampled = [one for one in curves.values() if one.sampler is not None and not one.sampler.whole]
    if sampled:
        # a sampled curve's first pass (sampled.py): the same lines, only counted
        for one in sampled:
            one.begin_count(decompressed_size(path) // 8)
        if hasattr(progress, "restart"):
            progress.restart("one-pass, first of two passes (the widely shared blocks)")
        scratch = StreamedWorkload(path.name, fmt)
        _read_lines(path, reader, trace_block_size, dict(enumerate(sampled)), scratch, start, stop, progress)
        for one in sampled:
            one.end_count()
        if hasattr(progress, "restart"):
            progress.restart("one-pass, second pass (the sample)")
    summary = StreamedWorkload(path.name, fmt, notes=notes)
    _read_lines(path, reader, trace_block_size, curves, summary, start, stop, progress, chaining)
    if not summary.num_requests:
        first = f" ({summary.problems[0]})" if summary.problems else ""
        raise ValueError(f"{path}: no usable {fmt} line{first}")
    if chaining is not None:
        summary.notes.append(chaining.note())
    return summary, curves


def _read_lines(path, reader, trace_block_size, curves, summary, start, stop, progress, chaining=None):
    """The file's requests [start:stop] into every OnePass of `curves`, counted in `summary`."""
    counter = [0]
    last_arrival = None
    with open_binary(path) as handle:
        requests = reader(_lines(handle, progress, counter), trace_block_size, summary.problems)
        for index, request in enumerate(requests):
            if last_arrival is not None and request.arrival < last_arrival:
                raise OutOfOrder(f"{path}: request {index + 1} arrives before the one above it")
            last_arrival = request.arrival
            if (start is not None and index < start) or (stop is not None and index >= stop):
                continue
            counter[0] += 1
            summary.num_requests += 1
            summary.prompt_tokens += request.num_prompt_tokens
            for one in curves.values():
                one.add_request(request)
            if hasattr(progress, "references"):
                progress.references += len(request.hash_ids)
            if chaining is not None:
                chaining.add(request)
    if progress is not None:
        progress(counter[0], os.path.getsize(path))
