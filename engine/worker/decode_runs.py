"""Batch decode that reads each sequence's run of consecutive blocks in place instead of gathering it.

A decode group used to gather every sequence's K/V into one [N, Hkv, L, D] copy per layer: at batch 8 with 512
tokens of context that copy was a quarter of a SmolLM2 decode step on the CPU. But a sequence's blocks are
mostly one run of consecutive blocks (its prompt, allocated together), then the blocks its decode added one at
a time, wherever the free list had them. So:
    the run     a view of the pool, one flash-attention call per sequence (no copy)
    the rest    the blocks after the run (a few per sequence; always the current token's block), gathered for
                the whole group at once and attended in one call, masked where a sequence has fewer
and the two parts merge by their log-sum-exps (engine/worker/sdpa.py's merge), as a chunk over a cached prefix
does. Runs of one length whose first slots are evenly spaced (prompts of one length admitted together; any two
runs of one length) are one strided view and one call: fewer calls, and work for both cores. The CPU flash kernel returns the log-sum-exp; other devices, windows and soft-capped scores keep the
gather (engine/worker/attention.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.worker.sdpa import _CPU_FLASH, merge

# a run must average this many tokens per sequence to pay for a kernel call of its own
MIN_RUN_TOKENS = 128


@dataclass
class RunCall:
    """One flash-attention call over runs of one length whose first slots are `stride` apart."""

    # the sequences (indices in the group) in the order of their runs
    rows: list[int]
    first_slot: int
    stride: int
    length: int


@dataclass
class DecodeRuns:
    calls: list[RunCall]
    # [N] where each sequence's result is in the calls' concatenated output
    order: torch.Tensor
    # [N, R] the blocks after each run (padding repeats a sequence's last block)
    rest_blocks: torch.Tensor
    # [N, 1, 1, R x block_size] additive (0 or -inf) where a sequence's rest is shorter, or None
    rest_mask: torch.Tensor | None


def _calls(starts: list[int], lengths: list[int]) -> list[RunCall]:
    """Runs grouped into evenly spaced ones of one length (sorted by first slot, taken greedily)."""
    calls: list[RunCall] = []
    for i in sorted(range(len(starts)), key=lambda i: (lengths[i], starts[i])):
        last = calls[-1] if calls else None
        if last is not None and last.length == lengths[i]:
            # sorted by first slot, so gap >= 0; 0 is a shared prefix (one view read twice)
            gap = starts[i] - starts[last.rows[-1]]
            if len(last.rows) == 1:
                last.stride = gap
            if gap == last.stride:
                last.rows.append(i)
                continue
        calls.append(RunCall([i], starts[i], 0, lengths[i]))
    return calls


def run_length(table: list[int], blocks: int) -> int:
    """Leading blocks of `table` that are consecutive, of its first `blocks`."""
    if not blocks:
        return 0
    first, n = table[0], 1
    while n < blocks and table[n] == first + n:
        n += 1
    return n


def plan_runs(
    tables: list[list[int]],
    positions: list[int],
    block_size: int,
    device: torch.device,
    dtype: torch.dtype,
) -> DecodeRuns | None:
    """The runs and rests of a decode group (host block tables, query positions); None where the runs are too
    short to pay for one call per sequence."""
    if device.type != "cpu" or _CPU_FLASH is None:
        return None
    starts, lengths, rests, rest_tokens = [], [], [], []
    for table, pos in zip(tables, positions):
        needed = pos // block_size + 1
        # the current token's block always goes to the rest, so no sequence has an empty rest
        run = run_length(table, needed - 1)
        starts.append(table[0] * block_size)
        lengths.append(run * block_size)
        rests.append(table[run:needed])
        rest_tokens.append(pos + 1 - run * block_size)
    if sum(lengths) < MIN_RUN_TOKENS * len(tables):
        return None
    width = max(len(r) for r in rests)
    padded = [r + [r[-1]] * (width - len(r)) for r in rests]
    mask = None
    if min(rest_tokens) < width * block_size:
        key_pos = torch.arange(width * block_size)[None, :]
        visible = key_pos < torch.tensor(rest_tokens)[:, None]
        mask = torch.zeros(visible.shape, dtype=dtype).masked_fill(~visible, float("-inf"))
        mask = mask[:, None, None].to(device)
    calls = _calls(starts, lengths)
    ran = [row for call in calls for row in call.rows]
    order = sorted(range(len(ran)), key=ran.__getitem__)
    return DecodeRuns(calls, torch.tensor(order, device=device), torch.tensor(padded, device=device), mask)


def decode_over_runs(
    runs: DecodeRuns,
    q: torch.Tensor,
    k_slots: torch.Tensor,
    v_slots: torch.Tensor,
    layer_blocks: torch.Tensor,
    scaling: float | None,
) -> torch.Tensor:
    """q [N, Hkv, G, D] (each KV head's query heads as its queries); k/v_slots [Hkv, slots, D] a layer's pool;
    layer_blocks [2 x Hkv, blocks, block_size x D] the same memory by block -> [N, Hkv, G, D]."""
    n, hkv, groups, dim = q.shape
    outs, lses = [], []
    slots = k_slots.shape[1]
    for call in runs.calls:
        m = len(call.rows)
        if not call.length:
            outs.append(q.new_zeros(m, hkv, groups, dim))
            lses.append(torch.full((m, hkv, groups), float("-inf"), device=q.device))
            continue
        # [m, Hkv, length, D]: sequence j's run starts stride x j slots after the first (views, no copy)
        size, stride = (m, hkv, call.length, dim), (call.stride * dim, slots * dim, dim, 1)
        offset = k_slots.storage_offset() + call.first_slot * dim
        k = k_slots.as_strided(size, stride, offset)
        v = v_slots.as_strided(size, stride, v_slots.storage_offset() + call.first_slot * dim)
        rows = q[call.rows[0] : call.rows[0] + 1] if m == 1 else q[call.rows]
        out, lse = _CPU_FLASH(rows, k, v, scale=scaling)
        outs.append(out)
        lses.append(lse)
    out_runs, lse_runs = torch.cat(outs)[runs.order], torch.cat(lses)[runs.order]
    both = layer_blocks[:, runs.rest_blocks.reshape(-1)].view(2, hkv, n, -1, dim).transpose(1, 2)
    out_rest, lse_rest = _CPU_FLASH(q, both[0], both[1], attn_mask=runs.rest_mask, scale=scaling)
    return merge(out_runs, lse_runs, out_rest, lse_rest)
