"""A binary block trace (block_trace.py) streamed into the one-pass curves a chunk at a time: the keys of every
request at each block size are made for the whole chunk at once (onepass.request_keys' rules, in numpy), so no
request becomes a Python object where the block size is the trace's or divides it."""

from __future__ import annotations

import numpy as np

from engine.trace.compressed import decompressed_size
from kvtui.whatif.block_trace import block_size_of, iter_chunks
from kvtui.whatif.onepass import OnePass
from kvtui.whatif.requests import OutOfOrder, SimRequest


def chunk_keys(hashes, starts, input_lengths, trace_block: int, block_size: int):
    """(keys, starts) of every request's full prompt blocks at `block_size`, which is the trace's block size or
    divides it: an id where it is the trace's, else the id and the block's place in it as one int."""
    full = input_lengths.astype(np.int64) // block_size
    new_starts = np.concatenate([[0], np.cumsum(full)])
    total = int(new_starts[-1])
    request = np.repeat(np.arange(len(full)), full)
    place = np.arange(total, dtype=np.int64) - new_starts[request]
    per = trace_block // block_size
    ids = hashes[starts[request] + place // per].astype(np.int64)
    keys = ids if per == 1 else ids * per + place % per
    return keys, new_starts


def one_pass_blocks(path, curves: dict[int, OnePass], summary, start, stop, progress) -> None:
    """Every chunk's requests [start:stop] (file order, which must be arrival order) into each OnePass; a
    sampled one reads the file twice (its first pass counts, sampled.py)."""
    trace_block = block_size_of(path)
    sampled = [one for one in curves.values() if one.sampler is not None and not one.sampler.whole]
    if sampled:
        for one in sampled:
            one.begin_count(decompressed_size(path) // 8)
        scratch = type(summary)(summary.name, summary.format)
        if hasattr(progress, "restart"):
            progress.restart("one-pass, first of two passes (the widely shared blocks)")
        _read(path, {bs: one for bs, one in curves.items() if one in sampled}, scratch, start, stop, progress)
        for one in sampled:
            one.end_count()
        if hasattr(progress, "restart"):
            progress.restart("one-pass, second pass (the sample)")
    summary.notes.append(
        f"each hash id is {trace_block} tokens; generated tokens are never cached (kvtui block trace)"
    )
    _read(path, curves, summary, start, stop, progress)


def _read(path, curves: dict[int, OnePass], summary, start, stop, progress) -> None:
    trace_block = block_size_of(path)
    offset, last = 0, None
    for chunk in iter_chunks(path, summary.problems):
        n = len(chunk.counts)
        stamps = chunk.timestamps
        back = np.flatnonzero(np.diff(stamps) < 0)
        if len(back) or (last is not None and n and stamps[0] < last):
            i = offset + (int(back[0]) + 1 if len(back) else 0)
            raise OutOfOrder(f"{path}: request {i + 1} arrives before the one above it")
        last = stamps[-1] if n else last
        low = max(0, (start or 0) - offset)
        high = n if stop is None else min(n, max(0, stop - offset))
        offset += n
        if hasattr(progress, "references"):
            progress.references += len(chunk.hashes)
        if low >= high:
            continue
        starts = chunk.starts
        inputs = chunk.input_lengths[low:high]
        hashes = chunk.hashes[starts[low] : starts[high]]
        local = starts[low : high + 1] - starts[low]
        summary.num_requests += high - low
        summary.prompt_tokens += int(inputs.sum())
        for block_size, one in curves.items():
            if one.first_arrival is None:
                one.first_arrival = float(stamps[low]) / 1000.0
            one.last_arrival = float(stamps[high - 1]) / 1000.0
            if trace_block % block_size == 0:
                keys, key_starts = chunk_keys(hashes, local, inputs, trace_block, block_size)
                one.add_batch(keys, key_starts, inputs.astype(np.int64))
                continue
            # a block size that is a multiple of the trace's: tuples of ids, a request at a time
            for i in range(high - low):
                ids = hashes[local[i] : local[i + 1]].tolist()
                arrival = float(stamps[low + i]) / 1000.0
                one.add_request(
                    SimRequest(
                        "",
                        arrival,
                        None,
                        hash_ids=ids,
                        input_length=int(inputs[i]),
                        trace_block_size=trace_block,
                    )
                )
        if progress is not None:
            progress(summary.num_requests, chunk.position)
    if not summary.num_requests:
        first = f" ({summary.problems[0]})" if summary.problems else ""
        raise ValueError(f"{path}: no requests in it{first}")
