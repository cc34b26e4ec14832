"""Sliding-window ring caches, the tensor half: each ring group's K/V rows and the snapshots' copies.

The bookkeeping (rows, heads, snapshot keys, restarts, events) is engine/core/rings.py's `RingManager`, which
also explains the layout. Here: apply what it decided (row copies for forks, snapshot restores, saves and
drops), and plan one forward's reads and writes.

Prefill of a chunk [start, end): read the ring's positions [max(S, start-W+1), start) and the sinks, append the
chunk's own new K/V (never through the ring: a chunk longer than W would overwrite what its first queries need),
attend with the window mask, then write the chunk's last W positions. Decode: write the one new position, then
read all S + W slots with a mask of the slots that hold a position inside the window.
Quantized K/V (kv_dtype): a slot holds head_dim + 4 uint8 (engine/worker/kv_quant.py); row copies and snapshots
move the bytes as they are, attention (engine/worker/attention.py ring_attention) dequantizes what it reads.
"""

from __future__ import annotations

import torch

from engine.core.rings import (
    RingGroup,
    RingManager,
    RingOp,
    RowCopy,
    SnapshotDrop,
    SnapshotRestore,
    SnapshotSave,
)
from engine.worker.batch import RingBatch, RingGroupBatch, RingSegment
from engine.worker.kv_quant import quantizer


def window_mask(query_pos: torch.Tensor, key_pos: torch.Tensor, window: int, sinks: int) -> torch.Tensor:
    """Causal, and inside the last `window` positions (current one included) or a sink."""
    return (key_pos <= query_pos) & ((key_pos > query_pos - window) | (key_pos < sinks)) & (key_pos >= 0)


class RingTensors:
    def __init__(
        self, manager: RingManager, dtype: torch.dtype, device: torch.device, kv_dtype: str | None = None
    ):
        self.manager = manager
        # quantized rows (head_dim + 4 uint8, engine/worker/kv_quant.py), or the model's dtype
        self.quant = quantizer(kv_dtype)
        self.shape = manager.shape
        self.sinks = manager.sinks
        self.groups = manager.groups
        self.layer_group = manager.layer_group
        self.device = device
        self._dtype = dtype
        self.pool = [self._empty(g, manager.num_rows) for g in self.groups]
        self.snapshots: dict[str, list[torch.Tensor]] = {}
        # the last forward's ring batch, until the step's commit keeps or drops its snapshots
        self.forward_batch: RingBatch | None = None

    def _empty(self, group: RingGroup, rows: int) -> torch.Tensor:
        s = self.shape
        return torch.zeros(
            len(group.layers),
            2,
            rows,
            self.sinks + group.window,
            s.kv_heads,
            s.head_dim if self.quant is None else self.quant.row_width(s.head_dim),
            dtype=self._dtype if self.quant is None else torch.uint8,
            device=self.device,
        )

    @property
    def nbytes(self) -> int:
        """Bytes allocated for rings (rows in use and spare rows)."""
        return sum(p.numel() * p.element_size() for p in self.pool)

    @property
    def rows(self) -> int:
        return self.pool[0].shape[2] if self.pool else 0

    def _grow(self) -> None:
        """The manager gave out rows beyond the tensors: grow them, keeping every row's contents."""
        old, new = self.rows, self.manager.num_rows
        if not self.pool or new <= old:
            return
        for g, grp in enumerate(self.groups):
            bigger = self._empty(grp, new)
            bigger[:, :, :old] = self.pool[g]
            self.pool[g] = bigger

    # the ring tensors may be inference tensors (grown during a forward)
    @torch.inference_mode()
    def apply(self, ops: list[RingOp], pending_saves: dict[int, list[torch.Tensor]] | None = None) -> None:
        """Carry out the manager's decisions, in order. `pending_saves`: the copies a forward took inside a
        chunk, by the flat row where the chunk starts and the boundary (see `plan`)."""
        self._grow()
        for op in ops:
            if isinstance(op, RowCopy):
                for pool in self.pool:
                    pool[:, :, op.dst] = pool[:, :, op.src]
            elif isinstance(op, SnapshotRestore):
                for pool, snap in zip(self.pool, self.snapshots[op.key]):
                    pool[:, :, op.row] = snap
            elif isinstance(op, SnapshotSave):
                if op.boundary == op.end:
                    self.snapshots[op.key] = [p[:, :, op.row].clone() for p in self.pool]
                else:
                    self.snapshots[op.key] = pending_saves[(op.row, op.boundary)]
            elif isinstance(op, SnapshotDrop):
                del self.snapshots[op.key]

    # --- one forward ------------------------------------------------------------------------------------
    def plan(self, chunks, rows: list[int]) -> RingBatch:
        """Index tensors for one forward; `rows[i]` = first row of chunk i in the flat batch."""
        manager, S, dev = self.manager, self.sinks, self.device
        states = [manager.begin(chunk.request, chunk.start) for chunk in chunks]
        self.apply(manager.take_pending())
        groups = []
        for grp in self.groups:
            W, gb = grp.window, RingGroupBatch()
            wr, ws, wf, dr, df, dpos = [], [], [], [], [], []
            for chunk, q0, state in zip(chunks, rows, states):
                start, n = chunk.start, chunk.num_tokens
                end = start + n
                new_pos = list(range(start, min(S, end))) + list(range(max(S, start, end - W), end))
                wr += [state.row] * len(new_pos)
                ws += [manager.slot(p, W) for p in new_pos]
                wf += [q0 + p - start for p in new_pos]
                if n == 1:
                    dr.append(state.row)
                    df.append(q0)
                    dpos.append(start)
                    continue
                ctx = list(range(min(S, start))) + list(range(max(S, start - W + 1), start))
                key_pos = torch.tensor(ctx + list(range(start, end)), device=dev)[None, :]
                query_pos = torch.arange(start, end, device=dev)[:, None]
                context_slots = torch.tensor([manager.slot(p, W) for p in ctx], dtype=torch.long, device=dev)
                seg = RingSegment(
                    q0, q0 + n, state.row, context_slots, window_mask(query_pos, key_pos, W, S)[None, None]
                )
                for b in manager.boundaries(start, end):
                    if b == end:
                        # taken from the ring itself after the forward
                        continue
                    kept = list(range(start, min(S, b))) + list(range(max(S, start, b - W), b))
                    seg.snapshots.append(
                        (
                            b,
                            self._empty(grp, 1)[:, :, 0],
                            torch.tensor([manager.slot(p, W) for p in kept], device=dev),
                            torch.tensor([q0 + p - start for p in kept], device=dev),
                        )
                    )
                gb.segments.append(seg)
            gb.write_rows = torch.tensor(wr, dtype=torch.long, device=dev)
            gb.write_slots = torch.tensor(ws, dtype=torch.long, device=dev)
            gb.write_flat = torch.tensor(wf, dtype=torch.long, device=dev)
            if dr:
                gb.decode_rows = torch.tensor(dr, device=dev)
                gb.decode_flat = torch.tensor(df, device=dev)
                if min(dpos) >= S + W - 1:
                    # every slot holds a position inside every window
                    gb.decode_mask = None
                else:
                    gb.decode_mask = self._decode_mask(torch.tensor(dpos, device=dev), W)[:, None, None, :]
            groups.append(gb)
        return RingBatch(self.layer_group, self.pool, groups, self.quant)

    def _decode_mask(self, positions: torch.Tensor, window: int) -> torch.Tensor:
        """[N, S+W]: after writing position p, which slots hold a position the query at p may read."""
        S = self.sinks
        p = positions[:, None]
        sink = torch.arange(S, device=self.device)[None, :] <= p
        r = torch.arange(window, device=self.device)[None, :]
        # the position slot r holds if it was written last lap
        held = p - torch.remainder(p - r, window)
        return torch.cat([sink, held >= S], dim=1)

    def commit(self, ops: list[RingOp]) -> None:
        """After the step: keep or drop the snapshots the last forward took, as the manager's commit decided
        (`RingManager.commit`, called by the engine core)."""
        batch, self.forward_batch = self.forward_batch, None
        if not self.manager.enabled or batch is None:
            return
        saved: dict[tuple[int, int], list[torch.Tensor]] = {}
        for gb in batch.groups:
            for seg in gb.segments:
                for boundary, buf, _, _ in seg.snapshots:
                    saved.setdefault((seg.row, boundary), []).append(buf)
        self.apply(ops, saved)
