"""Sliding-window ring caches, the bookkeeping half: which row each request owns, where its write head is, which
snapshots exist and which one a restart uses. Torch-free; the tensors are engine/worker/ring_tensors.py.

Layout. A *group* is the ring layers that share one window size W. Each group has one tensor
`[layer_in_group, 0 (K) or 1 (V), row, S + W, kv_heads, head_dim]`; a running request owns one row.
    sink position p < S      -> physical slot p (written once, never overwritten; S = 0 unless sinks are on)
    any other position p     -> physical slot S + (p mod W)   (the ring proper: "slot = position mod W")
Query q reads q-W+1..q (the current token counts, as transformers' `kv_idx > q_idx - W`), plus the sinks.

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

What the worker must do with the tensors is data, as with the pool's copies: `resume` and `fork` append
`RowCopy` / `SnapshotRestore` to `pending`, which the runner applies in order before its next forward; after a
forward, `commit` returns the `SnapshotSave` / `SnapshotDrop` of that forward, which it applies at once.

Attention sinks (StreamingLLM, opt-in): every layer becomes a ring layer with S sink slots and window W (a
native window smaller than W is kept). It changes the model's answer (engine/worker/sinks.py measures by how
much).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.core.hashing import ring_root, span_hashes
from engine.models.shape import ModelShape
from engine.trace.writer import TraceSink

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
    # chained hash at each snapshot boundary, in order
    keys: list[str] = field(default_factory=list)
    # one past the last position written into the row: an edit that moves the head back does not unwrite the
    # positions after it, and they may have overwritten the slots an earlier restart point needs
    written: int = 0

    def wrote(self, end: int) -> None:
        """Positions up to `end` were computed into the row: the head and what the row holds are both there."""
        self.head = self.written = end


@dataclass(frozen=True)
class RowCopy:
    """A fork: row `dst` becomes a copy of row `src` in every group."""

    src: int
    dst: int


@dataclass(frozen=True)
class SnapshotRestore:
    """A restart from a snapshot: row `row` becomes the snapshot saved under `key`."""

    key: str
    row: int


@dataclass(frozen=True)
class SnapshotSave:
    """Keep the ring of `row` as it was at position `boundary` under `key` (the row itself when `boundary` is
    where the chunk ended, else the copy the forward took inside the chunk)."""

    key: str
    row: int
    boundary: int
    end: int


@dataclass(frozen=True)
class SnapshotDrop:
    """The snapshot store is over its byte budget: forget `key`'s tensors."""

    key: str


RingOp = RowCopy | SnapshotRestore | SnapshotSave | SnapshotDrop


class RingManager:
    def __init__(
        self,
        shape: ModelShape,
        block_size: int,
        trace: TraceSink,
        snapshot_bytes: int = DEFAULT_SNAPSHOT_BYTES,
        rows: int = 4,
        interval: int | None = None,
    ):
        self.shape = shape
        self.sinks = shape.sink_tokens
        self.trace = trace
        by_window: dict[int, list[int]] = {}
        for layer, w in enumerate(shape.windows):
            if w is not None:
                by_window.setdefault(w, []).append(layer)
        self.groups = [RingGroup(w, layers) for w, layers in by_window.items()]
        self.layer_group = {
            layer: (g, i) for g, grp in enumerate(self.groups) for i, layer in enumerate(grp.layers)
        }
        widest = max((g.window for g in self.groups), default=1)
        # a snapshot per `interval` positions costs about what paging the window layers would; a finer interval
        # (a multiple of block_size) restarts closer to the edit point for more snapshot bytes
        self.interval = interval or block_size * -(-widest // block_size)
        if self.interval % block_size:
            raise ValueError(
                f"snapshot interval {self.interval} must be a multiple of the block size {block_size}"
            )
        self.num_rows = rows
        self.free_rows = list(range(rows))
        self.states: dict[str, RingState] = {}
        # snapshot keys in LRU order; the tensors are the worker's
        self.snapshots: OrderedDict[str, None] = OrderedDict()
        self.snapshot_budget = snapshot_bytes
        self.stats = {"snapshots_saved": 0, "snapshots_evicted": 0, "snapshot_hits": 0}
        # what the worker must do to the ring tensors before its next forward, in order
        self.pending: list[RingOp] = []

    # --- memory -----------------------------------------------------------------------------------------
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
        return self.num_rows * self.bytes_per_request() if self.enabled else 0

    def snapshot_nbytes(self) -> int:
        return len(self.snapshots) * self.bytes_per_request()

    def take_pending(self) -> list[RingOp]:
        ops, self.pending = self.pending, []
        return ops

    # --- life of a request ------------------------------------------------------------------------------
    def state(self, request_id: str) -> RingState:
        """The request's rings, given a row on first use (the worker grows its tensors to `num_rows`)."""
        state = self.states.get(request_id)
        if state is None:
            if not self.free_rows:
                old = self.num_rows
                self.num_rows = max(4, 2 * old)
                self.free_rows += range(old, self.num_rows)
            state = self.states[request_id] = RingState(self.free_rows.pop(0))
        return state

    def free(self, request_id: str) -> None:
        """Finish or preemption: the rows go back; snapshots (shared by prefix) stay."""
        state = self.states.pop(request_id, None)
        if state is not None:
            self.free_rows.append(state.row)

    def fork(self, parent_id: str, child_id: str) -> None:
        parent = self.states.get(parent_id)
        if parent is None or not self.enabled:
            return
        child = self.state(child_id)
        self.pending.append(RowCopy(parent.row, child.row))
        child.head, child.keys, child.written = parent.head, list(parent.keys), parent.written
        self.trace.emit(
            "ring_resume",
            request_id=child_id,
            wanted=child.head,
            position=child.head,
            source="fork",
            recompute_tokens=0,
            reason="none",
        )

    def _resumable_in_ring(self, state: RingState | None, position: int) -> bool:
        if state is None or position > state.head:
            return False
        never_wrapped = all(state.written <= self.sinks + g.window for g in self.groups)
        # restarting at p reads the W - 1 positions before it: intact only if no position written after them
        # came round to their slots
        return position >= state.written - 1 or never_wrapped

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
            del state.keys[position // self.interval :]
        else:
            tokens = request.tokens if tokens is None else tokens
            keys = self.chain(tokens, position, request.cache_salt)
            for i in range(len(keys) - 1, -1, -1):
                if keys[i] in self.snapshots:
                    source, resumed = "snapshot", (i + 1) * self.interval
                    self._restore(rid, keys[: i + 1])
                    break
            else:
                self.state(rid).keys = []
                self.state(rid).wrote(0)
        self.trace.emit(
            "ring_resume",
            request_id=rid,
            wanted=position,
            position=resumed,
            source=source,
            recompute_tokens=position - resumed,
            reason="window" if resumed < position else "none",
        )
        return resumed

    def _restore(self, request_id: str, keys: list[str]) -> None:
        state = self.state(request_id)
        self.snapshots.move_to_end(keys[-1])
        self.pending.append(SnapshotRestore(keys[-1], state.row))
        state.keys = list(keys)
        state.wrote(len(keys) * self.interval)
        self.stats["snapshot_hits"] += 1

    def chain(self, tokens: list[int], upto: int, salt: str | None, keys: Sequence[str] = ()) -> list[str]:
        """Chained hash at every snapshot boundary <= upto (engine/core/hashing.py), continuing `keys`."""
        return span_hashes(tokens, self.interval, upto, ring_root(salt), keys)

    # --- one forward ------------------------------------------------------------------------------------
    def begin(self, request, start: int) -> RingState:
        """A chunk from `start` is about to run: the ring must continue where it stopped (a restart anywhere
        else goes through `resume`); a chunk from 0 starts afresh."""
        state = self.state(request.request_id)
        if start == 0:
            state.keys = []
            state.wrote(0)
        elif start != state.head:
            raise RuntimeError(
                f"request {request.request_id}: its window-layer ring is at position {state.head} but the "
                f"chunk starts at {start}; a prefix hit or edit must call RingManager.resume() to find an "
                "exact restart point"
            )
        return state

    def slot(self, position: int, window: int) -> int:
        return position if position < self.sinks else self.sinks + position % window

    def boundaries(self, start: int, end: int) -> list[int]:
        """Snapshot boundaries a chunk [start, end) passes (none when one snapshot exceeds the budget)."""
        if self.snapshot_budget < self.bytes_per_request():
            return []
        first = (start // self.interval + 1) * self.interval
        return list(range(first, end + 1, self.interval))

    def commit(self, chunks) -> list[RingOp]:
        """After the forward: advance heads, keep snapshots, emit ring_write events. Returns the snapshot saves
        and drops, in order, for the worker to apply now."""
        if not self.enabled:
            return []
        ops: list[RingOp] = []
        for chunk in chunks:
            req, start, n = chunk.request, chunk.start, chunk.num_tokens
            end = start + n
            state = self.states[req.request_id]
            bounds = self.boundaries(start, end)
            if bounds:
                state.keys = self.chain(req.tokens, bounds[-1], req.cache_salt, state.keys)
            for b in bounds:
                self._save(SnapshotSave(state.keys[b // self.interval - 1], state.row, b, end), ops)
            state.wrote(end)
            for g, grp in enumerate(self.groups):
                W, S = grp.window, self.sinks
                before = range(max(S, start - W), start)
                evicted = [p for p in before if p < max(S, end - W)]
                self.trace.emit(
                    "ring_write",
                    request_id=req.request_id,
                    group=g,
                    window=W,
                    start=start,
                    end=end,
                    evicted=evicted,
                    layers=grp.layers,
                    sink_tokens=S,
                )
        return ops

    def _save(self, save: SnapshotSave, ops: list[RingOp]) -> None:
        if save.key in self.snapshots:
            self.snapshots.move_to_end(save.key)
            return
        self.snapshots[save.key] = None
        ops.append(save)
        self.stats["snapshots_saved"] += 1
        while self.snapshot_nbytes() > self.snapshot_budget:
            dropped, _ = self.snapshots.popitem(last=False)
            ops.append(SnapshotDrop(dropped))
            self.stats["snapshots_evicted"] += 1
