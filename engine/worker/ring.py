"""Sliding-window ring caches: K/V of window layers in O(W) per request, however long the sequence grows.

Layout. A *group* is the ring layers that share one window size W. Each group has one tensor
`pool[layer_in_group, 0 (K) or 1 (V), row, S + W, kv_heads, head_dim]`; a running request owns one row.
    sink position p < S      -> physical slot p (written once, never overwritten; S = 0 unless sinks are on)
    any other position p     -> physical slot S + (p mod W)   (the ring proper: "slot = position mod W")
Query q reads q-W+1..q (the current token counts, as transformers' `kv_idx > q_idx - W`), plus the sinks.

Prefill of a chunk [start, end): read the ring's positions [max(S, start-W+1), start) and the sinks, append the
chunk's own new K/V (never through the ring: a chunk longer than W would overwrite what its first queries need),
attend with the window mask, then write the chunk's last W positions. Decode: write the one new position, then
read all S + W slots with a mask of the slots that hold a position inside the window.

Restarting somewhere else (edits, prefix hits, forks). Window layer l at position a needs ITS OWN K/V of
a-W+1..a-1, which depend on every earlier position through the layers below: recomputing the last W-1 positions
is not enough (L window layers see L*(W-1) back). An exact restart at a needs the ring state at a. Sources:
    ring      the request's own ring, if a >= head-1 or the ring never wrapped (nothing in it overwritten yet);
    snapshot  a copy of the whole row taken when the write head passed a multiple of `interval`
              (= block_size * ceil(max W / block_size), so a snapshot costs about what a block of window-layer
              K/V would) and kept in an LRU store under a byte budget, keyed by a chained hash of the tokens
              before it and the cache salt, so other requests with the same prefix (prefix hits) and the same
              request after an edit can resume there;
    start     position 0 (always exact).
`resume(request, a)` picks the largest exact point <= a, makes the ring ready there and says which (event
`ring_resume`). Cost of a restart = a - resumed position, in tokens recomputed through all layers; full layers'
blocks before that point stay valid and are read, not rewritten.

Attention sinks (StreamingLLM, opt-in): every layer becomes a ring layer with S sink slots and window W (a
native window smaller than W is kept). It changes the model's answer, so at finish the store compares the
logits of its sequence with a no-cache full-attention forward (engine/worker/sinks.py, event `sink_divergence`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from engine.worker.batch import RingBatch, RingGroupBatch, RingSegment
from engine.core.hashing import ring_root, span_hashes
from engine.models.shape import ModelShape
from engine.trace import TraceSink

DEFAULT_SNAPSHOT_BYTES = 64 * 2**20


@dataclass
class RingGroup:
    window: int
    layers: list[int]


@dataclass
class RingState:
    """One request's rings: its row in every group and the next position to compute."""

    row: int
    head: int = 0
    keys: list[str] = field(default_factory=list)  # chained hash at each snapshot boundary, in order


def window_mask(query_pos: torch.Tensor, key_pos: torch.Tensor, window: int, sinks: int) -> torch.Tensor:
    """Causal, and inside the last `window` positions (current one included) or a sink."""
    return (key_pos <= query_pos) & ((key_pos > query_pos - window) | (key_pos < sinks)) & (key_pos >= 0)


class RingStore:
    def __init__(self, shape: ModelShape, block_size: int, dtype: torch.dtype, device: torch.device,
                 trace: TraceSink, snapshot_bytes: int = DEFAULT_SNAPSHOT_BYTES, rows: int = 4,
                 interval: int | None = None):
        self.shape = shape
        self.sinks = shape.sink_tokens
        self.trace = trace
        self.device = device
        by_window: dict[int, list[int]] = {}
        for layer, w in enumerate(shape.windows):
            if w is not None:
                by_window.setdefault(w, []).append(layer)
        self.groups = [RingGroup(w, layers) for w, layers in by_window.items()]
        self.layer_group = {layer: (g, i) for g, grp in enumerate(self.groups) for i, layer in enumerate(grp.layers)}
        widest = max((g.window for g in self.groups), default=1)
        # a snapshot per `interval` positions costs about what paging the window layers would; a finer interval
        # (a multiple of block_size) restarts closer to the edit point for more snapshot bytes
        self.interval = interval or block_size * -(-widest // block_size)
        if self.interval % block_size:
            raise ValueError(f"snapshot interval {self.interval} must be a multiple of the block size {block_size}")
        self._dtype = dtype
        self.pool = [self._empty(g, rows) for g in self.groups]
        self.free_rows = list(range(rows))
        self.states: dict[str, RingState] = {}
        self.snapshots: OrderedDict[str, list[torch.Tensor]] = OrderedDict()
        self.snapshot_budget = snapshot_bytes
        self.stats = {"snapshots_saved": 0, "snapshots_evicted": 0, "snapshot_hits": 0}

    # --- memory -----------------------------------------------------------------------------------------
    def _empty(self, group: RingGroup, rows: int) -> torch.Tensor:
        s = self.shape
        return torch.zeros(len(group.layers), 2, rows, self.sinks + group.window, s.kv_heads, s.head_dim,
                           dtype=self._dtype, device=self.device)

    @property
    def enabled(self) -> bool:
        return bool(self.groups)

    def bytes_per_request(self) -> int:
        """K/V bytes of one request's rings: 2 x ring layers x (S + W) x kv_heads x head_dim x elem bytes."""
        return self.shape.ring_bytes_per_request()

    def bytes_in_use(self) -> int:
        return len(self.states) * self.bytes_per_request()

    @property
    def nbytes(self) -> int:
        """Bytes allocated for rings (rows in use and spare rows)."""
        return sum(p.numel() * p.element_size() for p in self.pool)

    def snapshot_nbytes(self) -> int:
        return len(self.snapshots) * self.bytes_per_request()

    def _grow(self) -> None:
        old = self.pool[0].shape[2] if self.pool else 0
        new = max(4, 2 * old)
        for g, grp in enumerate(self.groups):
            bigger = self._empty(grp, new)
            bigger[:, :, :old] = self.pool[g]
            self.pool[g] = bigger
        self.free_rows += range(old, new)

    # --- life of a request ------------------------------------------------------------------------------
    def _state(self, request_id: str) -> RingState:
        state = self.states.get(request_id)
        if state is None:
            if not self.free_rows:
                self._grow()
            state = self.states[request_id] = RingState(self.free_rows.pop(0))
        return state

    def free(self, request_id: str) -> None:
        """Finish or preemption: the rows go back; snapshots (shared by prefix) stay."""
        state = self.states.pop(request_id, None)
        if state is not None:
            self.free_rows.append(state.row)

    @torch.inference_mode()  # the ring tensors may be inference tensors (grown during a forward)
    def fork(self, parent_id: str, child_id: str) -> None:
        parent = self.states.get(parent_id)
        if parent is None or not self.enabled:
            return
        child = self._state(child_id)
        for pool in self.pool:
            pool[:, :, child.row] = pool[:, :, parent.row]
        child.head, child.keys = parent.head, list(parent.keys)
        self.trace.emit("ring_resume", request_id=child_id, wanted=child.head, position=child.head, source="fork",
                        recompute_tokens=0, reason="none")

    def _resumable_in_ring(self, state: RingState | None, position: int) -> bool:
        if state is None or position > state.head:
            return False
        never_wrapped = all(state.head <= self.sinks + g.window for g in self.groups)
        return position >= state.head - 1 or never_wrapped

    @torch.inference_mode()  # the ring tensors may be inference tensors (grown during a forward)
    def resume(self, request, position: int, tokens: list[int] | None = None) -> int:
        """Make the rings ready to compute from the largest exact restart point <= position; return that point.

        For an edit (the request has rings) or a prefix hit (a new request; `position` = matched tokens).
        `tokens`: the sequence the request will have (default: its current tokens).
        """
        if not self.enabled or position == 0:
            return position
        rid = request.request_id
        state = self.states.get(rid)
        source, resumed = "start", 0
        if self._resumable_in_ring(state, position):
            source, resumed = "ring", position
            state.head = position
            del state.keys[position // self.interval:]
        else:
            tokens = request.tokens if tokens is None else tokens
            keys = self._chain(tokens, position, request.cache_salt)
            for i in range(len(keys) - 1, -1, -1):
                if keys[i] in self.snapshots:
                    source, resumed = "snapshot", (i + 1) * self.interval
                    self._restore(rid, keys[:i + 1])
                    break
            else:
                self._state(rid).head, self._state(rid).keys = 0, []
        self.trace.emit("ring_resume", request_id=rid, wanted=position, position=resumed, source=source,
                        recompute_tokens=position - resumed, reason="window" if resumed < position else "none")
        return resumed

    def _restore(self, request_id: str, keys: list[str]) -> None:
        state = self._state(request_id)
        saved = self.snapshots[keys[-1]]
        self.snapshots.move_to_end(keys[-1])
        for pool, snap in zip(self.pool, saved):
            pool[:, :, state.row] = snap
        state.head, state.keys = len(keys) * self.interval, list(keys)
        self.stats["snapshot_hits"] += 1

    def _chain(self, tokens: list[int], upto: int, salt: str | None, keys: list[str] | None = None) -> list[str]:
        """Chained hash at every snapshot boundary <= upto (engine/core/hashing.py), continuing `keys`."""
        return span_hashes(tokens, self.interval, upto, ring_root(salt), keys or ())

    # --- one forward ------------------------------------------------------------------------------------
    def plan(self, chunks, rows: list[int]) -> RingBatch:
        """Index tensors for one forward; `rows[i]` = first row of chunk i in the flat batch."""
        S, dev = self.sinks, self.device
        groups = []
        for grp in self.groups:
            W, gb = grp.window, RingGroupBatch()
            wr, ws, wf, dr, df, dpos = [], [], [], [], [], []
            for chunk, q0 in zip(chunks, rows):
                state = self._check(chunk)
                start, n = chunk.start, chunk.num_tokens
                end = start + n
                new_pos = list(range(start, min(S, end))) + list(range(max(S, start, end - W), end))
                wr += [state.row] * len(new_pos)
                ws += [self._slot(p, W) for p in new_pos]
                wf += [q0 + p - start for p in new_pos]
                if n == 1:
                    dr.append(state.row)
                    df.append(q0)
                    dpos.append(start)
                    continue
                ctx = list(range(min(S, start))) + list(range(max(S, start - W + 1), start))
                key_pos = torch.tensor(ctx + list(range(start, end)), device=dev)[None, :]
                query_pos = torch.arange(start, end, device=dev)[:, None]
                seg = RingSegment(q0, q0 + n, state.row, torch.tensor([self._slot(p, W) for p in ctx],
                                                                      dtype=torch.long, device=dev),
                                  window_mask(query_pos, key_pos, W, S)[None, None])
                for b in self._boundaries(start, end):
                    if b == end:
                        continue  # taken from the ring itself after the forward
                    kept = list(range(start, min(S, b))) + list(range(max(S, start, b - W), b))
                    seg.snapshots.append((self._empty(grp, 1)[:, :, 0],
                                          torch.tensor([self._slot(p, W) for p in kept], device=dev),
                                          torch.tensor([q0 + p - start for p in kept], device=dev)))
                gb.segments.append(seg)
            gb.write_rows = torch.tensor(wr, dtype=torch.long, device=dev)
            gb.write_slots = torch.tensor(ws, dtype=torch.long, device=dev)
            gb.write_flat = torch.tensor(wf, dtype=torch.long, device=dev)
            if dr:
                gb.decode_rows = torch.tensor(dr, device=dev)
                gb.decode_flat = torch.tensor(df, device=dev)
                if min(dpos) >= S + W - 1:
                    gb.decode_mask = None  # every slot holds a position inside every window
                else:
                    gb.decode_mask = self._decode_mask(torch.tensor(dpos, device=dev), W)[:, None, None, :]
            groups.append(gb)
        return RingBatch(self, groups)

    def _slot(self, position: int, window: int) -> int:
        return position if position < self.sinks else self.sinks + position % window

    def _decode_mask(self, positions: torch.Tensor, window: int) -> torch.Tensor:
        """[N, S+W]: after writing position p, which slots hold a position the query at p may read."""
        S = self.sinks
        p = positions[:, None]
        sink = torch.arange(S, device=self.device)[None, :] <= p
        r = torch.arange(window, device=self.device)[None, :]
        held = p - torch.remainder(p - r, window)  # the position slot r holds if it was written last lap
        return torch.cat([sink, held >= S], dim=1)

    def _boundaries(self, start: int, end: int) -> list[int]:
        if self.snapshot_budget < self.bytes_per_request():
            return []
        first = (start // self.interval + 1) * self.interval
        return list(range(first, end + 1, self.interval))

    def _check(self, chunk):
        """The ring must continue where it stopped; a restart anywhere else must go through `resume`."""
        request = chunk.request
        state = self._state(request.request_id)
        if chunk.start == 0:
            state.head, state.keys = 0, []
        elif chunk.start != state.head:
            raise RuntimeError(
                f"request {request.request_id}: its window-layer ring is at position {state.head} but the chunk "
                f"starts at {chunk.start}; a prefix hit or edit must call RingStore.resume() to find an exact "
                "restart point")
        return state

    def commit(self, chunks, batch: RingBatch) -> None:
        """After the forward: advance heads, keep snapshots, emit ring_write events."""
        if not self.enabled:
            return
        snaps = {}
        for gb in batch.groups:
            for seg in gb.segments:
                for buf, _, _ in seg.snapshots:
                    snaps.setdefault(seg.q_start, []).append(buf)
        row_start = 0
        for chunk in chunks:
            req, start, n = chunk.request, chunk.start, chunk.num_tokens
            end = start + n
            state = self.states[req.request_id]
            bounds = self._boundaries(start, end)
            if bounds:
                state.keys = self._chain(req.tokens, bounds[-1], req.cache_salt, state.keys)
            pending = {}
            for gb in batch.groups:
                seg = next((s for s in gb.segments if s.q_start == row_start), None)
                if seg is not None:
                    for (buf, _, _), b in zip(seg.snapshots, [b for b in bounds if b != end]):
                        pending.setdefault(b, []).append(buf)
            for b in bounds:
                if b == end:
                    self._save(state.keys[b // self.interval - 1], [p[:, :, state.row].clone() for p in self.pool])
                else:
                    self._save(state.keys[b // self.interval - 1], pending[b])
            state.head = end
            for g, grp in enumerate(self.groups):
                W, S = grp.window, self.sinks
                before = range(max(S, start - W), start)
                evicted = [p for p in before if p < max(S, end - W)]
                self.trace.emit("ring_write", request_id=req.request_id, group=g, window=W, start=start, end=end,
                                evicted=evicted, layers=grp.layers, sink_tokens=S)
            row_start += n

    def _save(self, key: str, tensors: list[torch.Tensor]) -> None:
        if key in self.snapshots:
            self.snapshots.move_to_end(key)
            return
        self.snapshots[key] = tensors
        self.stats["snapshots_saved"] += 1
        while self.snapshot_nbytes() > self.snapshot_budget:
            self.snapshots.popitem(last=False)
            self.stats["snapshots_evicted"] += 1
