"""The attention masks of one engine step, derived from the trace alone (torch-free).

A step's `prefill_chunk` / `decode` events give each request's queries: positions [start, end) computed this
step; the keys are positions [0, end). The header's per-layer `windows` (null = full attention) and
`sink_tokens` give each layer kind's rule, and the step's `ring_write` events what the window layers' rings
did. For query q and key k <= q (a causal decoder never sees k > q):
- full attention: every k <= q; keys before `start` are the cached prefix (K/V from the prefix cache or
  earlier steps, fully visible to every query of the chunk), keys in [start, q] the chunk's lower triangle;
- window W (the current token plus the W-1 before it): q - W < k <= q, plus the sink columns k < S when
  attention sinks are on.

A `kvtui sinks --trace` trace (header kind "sinks") holds three caches of one budget side by side, so the
header's rule (the sinks mode's engine: W - S window slots and S sinks) is the rule of one of them only. There
each request's rule is its own cache event of the step (`request_rules`): a `ring_write` gives its window and
sink slots (`window`: W, no sinks; `sinks`: W - S and S), a `ring_kept` the set H2O held (`heavy-hitters`,
`KeptSet`): query q sees its `recent` newest keys and the recorded positions below them, the heavy hitters.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

# most events looked at backwards from the cursor to find the step's events
SCAN_LIMIT = 200_000

# regions of a (query, key) pair
CACHED, CHUNK, SINK, MASKED, FUTURE = "cached", "chunk", "sink", "masked", "future"
# a key H2O holds outside the query's recent window
HEAVY = "heavy"


@dataclass(frozen=True)
class Chunk:
    request_id: str
    # prefill | decode
    kind: str
    # first query position
    start: int
    # one past the last; keys are [0, end)
    end: int

    @property
    def queries(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class LayerKind:
    # None: full attention
    window: int | None
    sinks: int
    layers: tuple[int, ...]

    @property
    def label(self) -> str:
        if self.window is None:
            return "full attention"
        return f"sliding window W={self.window}" + (f" + {self.sinks} sinks" if self.sinks else "")

    def region(self, q: int, k: int, start: int) -> str:
        if k > q:
            return FUTURE
        if self.window is not None and k <= q - self.window:
            return SINK if k < self.sinks else MASKED
        return CACHED if k < start else CHUNK


@dataclass(frozen=True)
class KeptSet:
    """A heavy-hitter cache (H2O) as its step's `ring_kept` records it: `kept`, the positions held when query
    `end - 1` read them. Query q of the step sees its `recent` newest keys (q - recent < k <= q) and the kept
    positions below them. Exact for q = end - 1; an earlier query of the step held every kept key <= q too (a
    key dropped never returns) and may have held a few more that H2O dropped before end - 1, which the trace
    does not record (`unshown`)."""

    kept: tuple[int, ...]
    recent: int
    budget: int
    end: int
    layer: int | None = None
    kv_head: int | None = None

    @property
    def label(self) -> str:
        return f"heavy hitters (H2O) budget {self.budget} = {self.budget - self.recent} heavy + {self.recent} recent"

    def region(self, q: int, k: int, start: int) -> str:
        if k > q:
            return FUTURE
        if k <= q - self.recent:
            i = bisect_left(self.kept, k)
            return HEAVY if i < len(self.kept) and self.kept[i] == k else MASKED
        return CACHED if k < start else CHUNK

    def unshown(self, q: int) -> int:
        """Keys query q held that the recorded set does not show: H2O holds min(q + 1, budget) keys a query."""
        _, counts = kept_cell(self, 0, q, q + 1, 0, q + 1)
        return min(q + 1, self.budget) - counts[CACHED] - counts[CHUNK] - counts[HEAVY]


@dataclass
class StepMasks:
    step: int | None
    chunks: list[Chunk] = field(default_factory=list)
    # (request, group) -> ring_write
    ring_writes: dict[tuple[str, int], dict] = field(default_factory=dict)
    # request -> its ring_write or ring_kept of the step (what a sinks trace's masks are drawn from)
    caches: dict[str, dict] = field(default_factory=dict)


def layer_kinds(header: dict) -> list[LayerKind]:
    """Layers grouped by window (full first), from the header's per-layer windows and sink tokens."""
    model = header.get("model") or {}
    windows = list(model.get("windows") or [None] * int(model.get("layers") or 0))
    sinks = int(model.get("sink_tokens") or 0)
    groups: dict[int | None, list[int]] = {}
    for layer, w in enumerate(windows):
        groups.setdefault(w, []).append(layer)
    order = sorted(groups, key=lambda w: (w is not None, w or 0))
    return [LayerKind(w, sinks if w is not None else 0, tuple(groups[w])) for w in order]


def request_rules(header: dict, masks: StepMasks, request_id: str) -> list[LayerKind | KeptSet]:
    """The rules a request's chunk is drawn with: the header's layer kinds (an engine trace), or in a sinks
    trace its own cache's, from its ring event of the step (every layer; empty while that event is ahead of
    the cursor)."""
    if header.get("kind") != "sinks":
        return layer_kinds(header)
    ev = masks.caches.get(request_id)
    if ev is None:
        return []
    if ev["type"] == "ring_kept":
        return [
            KeptSet(
                tuple(sorted(ev["kept"])),
                ev["recent"],
                ev["budget"],
                ev["end"],
                ev.get("layer"),
                ev.get("kv_head"),
            )
        ]
    layers = tuple(range(int((header.get("model") or {}).get("layers") or 0)))
    return [LayerKind(ev["window"], int(ev.get("sink_tokens") or 0), layers)]


def step_masks(events: list[dict], cursor: int) -> StepMasks:
    """The last engine step whose chunks are visible at `cursor` (events applied), with its ring writes and
    each request's cache event (its ring_write or ring_kept)."""
    step: int | None = None
    chunks: list[Chunk] = []
    rings: dict[tuple[str, int], dict] = {}
    caches: dict[str, dict] = {}
    # ring events after the last step-tagged event: this step's when a chunk comes before them (a sinks
    # trace writes each cache's event after its chunk), the next step's when a step event does (the engine
    # writes ring_write during the forward, before the step's chunks)
    pending: dict[str, dict] = {}
    for i in range(min(cursor, len(events)) - 1, max(-1, cursor - SCAN_LIMIT - 1), -1):
        ev = events[i]
        etype = ev["type"]
        if etype in ("ring_write", "ring_kept"):
            (caches if step is not None else pending).setdefault(ev["request_id"], ev)
        if etype in ("prefill_chunk", "decode", "step"):
            if step is None:
                step = ev["step"]
                if etype != "step":
                    caches.update(pending)
            elif ev["step"] != step:
                break
            if etype == "prefill_chunk":
                chunks.append(Chunk(ev["request_id"], "prefill", ev["start"], ev["end"]))
            elif etype == "decode":
                chunks.append(Chunk(ev["request_id"], "decode", ev["position"], ev["position"] + 1))
        elif etype == "ring_write" and step is not None:
            rings.setdefault((ev["request_id"], ev["group"]), ev)
    chunks.reverse()
    ids = {c.request_id for c in chunks}
    return StepMasks(
        step,
        chunks,
        {key: ev for key, ev in rings.items() if key[0] in ids},
        {rid: ev for rid, ev in caches.items() if rid in ids},
    )


def cell(
    kind: LayerKind | KeptSet, start: int, q0: int, q1: int, k0: int, k1: int
) -> tuple[float, dict[str, int]]:
    """Fraction of (query, key) pairs visible in a cell of queries [q0, q1) x keys [k0, k1), and the count of
    pairs per region (counted by intervals, not pair by pair)."""
    if isinstance(kind, KeptSet):
        return kept_cell(kind, start, q0, q1, k0, k1)
    counts = {CACHED: 0, CHUNK: 0, SINK: 0, MASKED: 0, FUTURE: 0}
    W, S = kind.window, kind.sinks
    for q in range(q0, q1):
        # keys <= q in the cell: [k0, hi)
        hi = min(k1, q + 1)
        counts[FUTURE] += k1 - max(k0, hi)
        if hi <= k0:
            continue
        # the window band [q-W+1, q]
        lo_band = k0 if W is None else max(k0, q - W + 1)
        band = max(0, hi - lo_band)
        if band:
            counts[CACHED] += max(0, min(hi, start) - lo_band)
            counts[CHUNK] += max(0, hi - max(lo_band, start))
        left = min(lo_band, hi)
        # keys of the cell left of the band (all <= q)
        before = max(0, left - k0)
        sinks = max(0, min(left, S) - k0) if W is not None else 0
        counts[SINK] += sinks
        counts[MASKED] += before - sinks
    total = (q1 - q0) * (k1 - k0)
    visible = counts[CACHED] + counts[CHUNK] + counts[SINK]
    return (visible / total if total else 0.0), counts


def kept_cell(kind: KeptSet, start: int, q0: int, q1: int, k0: int, k1: int) -> tuple[float, dict[str, int]]:
    """`cell` of a heavy-hitter cache: the recent band as a window's, the kept positions below it counted by
    bisection."""
    counts = {CACHED: 0, CHUNK: 0, HEAVY: 0, MASKED: 0, FUTURE: 0}
    kept = kind.kept
    for q in range(q0, q1):
        hi = min(k1, q + 1)
        counts[FUTURE] += k1 - max(k0, hi)
        if hi <= k0:
            continue
        lo_band = max(k0, q - kind.recent + 1)
        if hi > lo_band:
            counts[CACHED] += max(0, min(hi, start) - lo_band)
            counts[CHUNK] += max(0, hi - max(lo_band, start))
        left = min(lo_band, hi)
        heavy = bisect_left(kept, left) - bisect_left(kept, k0) if left > k0 else 0
        counts[HEAVY] += heavy
        counts[MASKED] += max(0, left - k0) - heavy
    total = (q1 - q0) * (k1 - k0)
    visible = counts[CACHED] + counts[CHUNK] + counts[HEAVY]
    return (visible / total if total else 0.0), counts
