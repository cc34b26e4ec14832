"""The attention masks of one engine step, derived from the trace alone (torch-free).

A step's `prefill_chunk` / `decode` events give each request's queries: positions [start, end) computed this
step; the keys are positions [0, end). The header's per-layer `windows` (null = full attention) and
`sink_tokens` give each layer kind's rule, and the step's `ring_write` events what the window layers' rings
did. For query q and key k <= q (a causal decoder never sees k > q):
- full attention: every k <= q; keys before `start` are the cached prefix (K/V from the prefix cache or
  earlier steps, fully visible to every query of the chunk), keys in [start, q] the chunk's lower triangle;
- window W (the current token plus the W-1 before it): q - W < k <= q, plus the sink columns k < S when
  attention sinks are on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# most events looked at backwards from the cursor to find the step's events
SCAN_LIMIT = 200_000

# regions of a (query, key) pair
CACHED, CHUNK, SINK, MASKED, FUTURE = "cached", "chunk", "sink", "masked", "future"


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


@dataclass
class StepMasks:
    step: int | None
    chunks: list[Chunk] = field(default_factory=list)
    # (request, group) -> ring_write
    ring_writes: dict[tuple[str, int], dict] = field(default_factory=dict)


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


def step_masks(events: list[dict], cursor: int) -> StepMasks:
    """The last engine step whose chunks are visible at `cursor` (events applied), with its ring writes."""
    step: int | None = None
    chunks: list[Chunk] = []
    rings: dict[tuple[str, int], dict] = {}
    for i in range(min(cursor, len(events)) - 1, max(-1, cursor - SCAN_LIMIT - 1), -1):
        ev = events[i]
        etype = ev["type"]
        if etype in ("prefill_chunk", "decode", "step"):
            if step is None:
                step = ev["step"]
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
    return StepMasks(step, chunks, {key: ev for key, ev in rings.items() if key[0] in ids})


def cell(kind: LayerKind, start: int, q0: int, q1: int, k0: int, k1: int) -> tuple[float, dict[str, int]]:
    """Fraction of (query, key) pairs visible in a cell of queries [q0, q1) x keys [k0, k1), and the count of
    pairs per region (counted by intervals, not pair by pair)."""
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
