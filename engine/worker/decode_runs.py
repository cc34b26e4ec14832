"""Batch decode that reads each sequence's run of consecutive blocks in place instead of gathering it.

Gathering every sequence's K/V of a decode group into one [N, Hkv, L, D] copy per layer costs a quarter of a
SmolLM2 decode step on the CPU at batch 8 with 512 tokens of context. But a sequence's blocks
are mostly a few runs of consecutive block ids (a prompt allocated together, ascending or descending as the
free list gave them); the blocks its decode added come one at a time, from anywhere. So:
    runs        each a view of the pool (no copy); keys are a set to attention (their positions are in them
                already), so a run's order in the block table does not matter
    the rest    the sequence's other blocks, its current token's block last, gathered for the whole group at
                once and attended in one call, masked where a sequence has fewer
and the parts merge by their log-sum-exps (one softmax over each sequence's pieces, as engine/worker/sdpa.py's
merge does for a chunk over a cached prefix). Runs of one length whose first slots are evenly spaced (prompts
of one length admitted together; any two runs of one length) are one strided view and one call: fewer calls,
and work for both cores.
The CPU flash kernel returns the log-sum-exp; other devices, windows and soft-capped scores keep the gather
(engine/worker/attention.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.worker.sdpa import _CPU_FLASH

# the runs must average this many tokens per sequence to pay for kernel calls of their own
MIN_RUN_TOKENS = 128
# a shorter run joins the rest
MIN_PIECE_TOKENS = 64


@dataclass
class RunCall:
    """One flash-attention call over runs of one length whose first slots are `stride` apart."""

    # the sequence (index in the group) of each run, in the order of their first slots
    rows: list[int]
    first_slot: int
    stride: int
    length: int
    # the rows as a tensor, made once a step (None: one row, read as a slice)
    index: torch.Tensor | None = None


@dataclass
class DecodeRuns:
    calls: list[RunCall]
    # [N, P] each sequence's pieces in the concatenated outputs (every call's rows in order, then the N rests),
    # padded with one more index: an empty piece (zero output, log-sum-exp -inf)
    pieces: torch.Tensor
    # some sequence has fewer than P pieces: the empty piece is appended
    padded: bool
    # [N, R] each sequence's blocks outside its runs, its current block last (padding repeats that one); None:
    # one sequence whose blocks are one run (any order), read in one call, rest_mask hiding its unwritten slots
    rest_blocks: torch.Tensor | None
    # [N, 1, 1, R x block_size] additive (0 or -inf) where a sequence's rest is shorter, or None
    rest_mask: torch.Tensor | None


def _calls(starts: list[int], lengths: list[int], rows: list[int]) -> list[RunCall]:
    """Runs grouped into evenly spaced ones of one length (sorted by first slot, taken greedily)."""
    calls: list[RunCall] = []
    for i in sorted(range(len(starts)), key=lambda i: (lengths[i], starts[i])):
        last = calls[-1] if calls else None
        if last is not None and last.length == lengths[i]:
            # sorted by first slot, so gap >= 0; 0 is a shared prefix (one view read twice)
            gap = starts[i] - last.first_slot - last.stride * (len(last.rows) - 1)
            if len(last.rows) == 1:
                last.stride = gap
            if gap == last.stride:
                last.rows.append(rows[i])
                continue
        calls.append(RunCall([rows[i]], starts[i], 0, lengths[i]))
    return calls


def runs_of(blocks: list[int], min_blocks: int) -> list[tuple[int, int]]:
    """(first block id, count) of every set of at least `min_blocks` consecutive block ids among `blocks`, in
    any order: keys are read as a set, so a prompt allocated in descending order is one run too."""
    if not blocks:
        return []
    first, n = blocks[0], len(blocks)
    # the common cases at C speed: allocated in one go, ascending or descending
    if blocks == list(range(first, first + n)):
        return [(first, n)] if n >= min_blocks else []
    if blocks == list(range(first, first - n, -1)):
        return [(first - n + 1, n)] if n >= min_blocks else []
    # a prompt allocated in one go, then fewer than min_blocks blocks from elsewhere (a decode's first ones)
    for tail in range(1, min(min_blocks, n - min_blocks + 1)):
        if blocks[: n - tail] == list(range(first, first + n - tail)):
            return [(first, n - tail)]
    ids = sorted(blocks)
    runs, start = [], 0
    for i in range(1, len(ids) + 1):
        if i == len(ids) or ids[i] != ids[i - 1] + 1:
            if i - start >= min_blocks:
                runs.append((ids[start], i - start))
            start = i
    return runs


def plan_runs(
    tables: list[list[int]],
    positions: list[int],
    block_size: int,
    device: torch.device,
    dtype: torch.dtype,
) -> DecodeRuns | None:
    """The runs and rests of a decode group (host block tables, query positions); None where the runs are too
    short to pay for their calls."""
    if device.type != "cpu" or _CPU_FLASH is None:
        return None
    if len(tables) == 1:
        whole = _one_run(tables[0], positions[0], block_size, device, dtype)
        if whole is not None:
            return whole
    starts, lengths, rows, rests, rest_tokens = [], [], [], [], []
    min_blocks = max(1, -(-MIN_PIECE_TOKENS // block_size))
    for i, (table, pos) in enumerate(zip(tables, positions)):
        needed = pos // block_size + 1
        # the current token's block always goes to the rest, so no sequence has an empty rest
        full = table[: needed - 1]
        runs = runs_of(full, min_blocks)
        for first, count in runs:
            starts.append(first * block_size)
            lengths.append(count * block_size)
            rows.append(i)
        inside = {b for first, count in runs for b in range(first, first + count)}
        rests.append([b for b in full if b not in inside] + [table[needed - 1]])
        rest_tokens.append(pos + 1 - len(inside) * block_size)
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
    calls = _calls(starts, lengths, rows)
    for call in calls:
        if len(call.rows) > 1:
            call.index = torch.tensor(call.rows, device=device)
    ran = [row for call in calls for row in call.rows]
    per = [[] for _ in tables]
    for piece, row in enumerate(ran):
        per[row].append(piece)
    for row in range(len(tables)):
        per[row].append(len(ran) + row)
    most, empty = max(len(p) for p in per), len(ran) + len(tables)
    pieces = torch.tensor([p + [empty] * (most - len(p)) for p in per], device=device)
    rest = torch.tensor(padded, device=device)
    return DecodeRuns(calls, pieces, any(len(p) < most for p in per), rest, mask)


def _one_run(
    table: list[int], pos: int, block_size: int, device: torch.device, dtype: torch.dtype
) -> DecodeRuns | None:
    """A sequence whose blocks, current one included, are one set of consecutive ids: one view of them all, the
    current block's slots after the query masked (a table the free list gave in descending order, say)."""
    blocks = table[: pos // block_size + 1]
    low, high = min(blocks), max(blocks)
    if high - low + 1 != len(blocks):
        return None
    current = blocks[-1]
    written = (current - low) * block_size + pos % block_size + 1
    mask = None
    if current != high:
        # the unwritten end of the current block lies inside the view
        visible = torch.ones(len(blocks) * block_size, dtype=torch.bool)
        visible[written : (current - low + 1) * block_size] = False
        mask = torch.zeros(visible.shape, dtype=dtype).masked_fill(~visible, float("-inf"))
        mask = mask[None, None, None].to(device)
    length = written if current == high else len(blocks) * block_size
    calls = [RunCall([0], low * block_size, 0, length)]
    return DecodeRuns(calls, torch.zeros(1, 1, dtype=torch.long, device=device), False, None, mask)


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
    if runs.rest_blocks is None:
        call = runs.calls[0]
        k = k_slots[:, call.first_slot : call.first_slot + call.length].unsqueeze(0)
        v = v_slots[:, call.first_slot : call.first_slot + call.length].unsqueeze(0)
        return _CPU_FLASH(q, k, v, attn_mask=runs.rest_mask, scale=scaling)[0]
    n, hkv, groups, dim = q.shape
    outs, lses = [], []
    slots = k_slots.shape[1]
    for call in runs.calls:
        # [m, Hkv, length, D]: run j starts stride x j slots after the first (views, no copy)
        size = (len(call.rows), hkv, call.length, dim)
        stride = (call.stride * dim, slots * dim, dim, 1)
        k = k_slots.as_strided(size, stride, k_slots.storage_offset() + call.first_slot * dim)
        v = v_slots.as_strided(size, stride, v_slots.storage_offset() + call.first_slot * dim)
        rows = q[call.rows[0] : call.rows[0] + 1] if call.index is None else q.index_select(0, call.index)
        out, lse = _CPU_FLASH(rows, k, v, scale=scaling)
        outs.append(out)
        lses.append(lse)
    both = layer_blocks[:, runs.rest_blocks.reshape(-1)].view(2, hkv, n, -1, dim).transpose(1, 2)
    out, lse = _CPU_FLASH(q, both[0], both[1], attn_mask=runs.rest_mask, scale=scaling)
    outs.append(out)
    lses.append(lse)
    # softmax over every piece of a sequence, weighted by exp(its lse - the sequence's log-sum-exp)
    if runs.padded:
        outs.append(q.new_zeros(1, hkv, groups, dim))
        lses.append(torch.full((1, hkv, groups), float("-inf"), device=q.device))
    out, lse = torch.cat(outs), torch.cat(lses)
    weight = torch.softmax(lse[runs.pieces], dim=1)
    return (out[runs.pieces].float() * weight[..., None]).sum(1).to(q.dtype)
