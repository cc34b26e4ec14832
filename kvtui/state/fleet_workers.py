"""One attached worker of a fleet (a publisher's data-parallel rank): the blocks it holds and has stored and
removed, and its stored / removed rates over the last seconds of trace time. `FleetState` (kvtui/state/fleet.py)
keeps one per worker. Its blocks are counted per tier: the GPU's on the worker itself (most events are the GPU's,
and its counts are the hot path), the tiers below it in `lower`."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvtui.state.fleet_tiers import GPU, ordered

# seconds of trace time the stored/removed rates average over
RATE_WINDOW = 5


@dataclass
class Worker:
    worker: str
    source: str
    name: str
    rank: int | None = None
    # GPU blocks, when the source was told (blocks=)
    blocks: int | None = None
    # blocks it holds (any medium); which ones: the nodes whose holders name it
    held: int = 0
    # KV-cache group -> blocks held in it
    held_by_group: dict = field(default_factory=dict)
    # blocks held on the GPU
    resident: int = 0
    # blocks stored and removed (events x hashes), every tier's
    stored: int = 0
    removed: int = 0
    # tier below the GPU (kvtui/state/fleet_tiers.py: CPU, CPU_PINNED, STORAGE, ...) -> [held, stored, removed]
    lower: dict = field(default_factory=dict)
    cleared: int = 0
    # extra physical copies of hashes it holds (each removed by a BlockRemoved of its own)
    copies: int = 0
    # blocks stored again that it already held, in a re-report (vLLM's kv_cache_report_mode=full)
    rereported: int = 0
    block_size: int | None = None
    # int(t) -> [stored, removed]
    buckets: dict = field(default_factory=dict)

    def tier(self, name: str) -> list:
        """[held, stored, removed] of a tier below the GPU, made on first use."""
        counts = self.lower.get(name)
        if counts is None:
            counts = self.lower[name] = [0, 0, 0]
        return counts

    def held_tiers(self) -> dict:
        """Blocks held per tier, fastest first: the GPU's, then each tier below it."""
        return {GPU: self.resident, **{name: self.lower[name][0] for name in ordered(self.lower)}}

    def stored_tiers(self) -> dict:
        below = {name: self.lower[name][1] for name in ordered(self.lower)}
        return {GPU: self.stored - sum(below.values()), **below}

    def removed_tiers(self) -> dict:
        below = {name: self.lower[name][2] for name in ordered(self.lower)}
        return {GPU: self.removed - sum(below.values()), **below}

    def rates(self, now: float) -> tuple[float, float]:
        """Blocks stored and removed per second over the last RATE_WINDOW seconds of trace time."""
        start = now - RATE_WINDOW
        stored = removed = 0
        for second, (s, r) in self.buckets.items():
            if second >= start:
                stored += s
                removed += r
        span = min(RATE_WINDOW, max(now, 1e-9))
        return stored / span, removed / span

    def bucket(self, t: float) -> list:
        """[stored, removed] of second int(t), made on first use; seconds older than the window are dropped."""
        second = int(t)
        bucket = self.buckets.get(second)
        if bucket is None:
            bucket = self.buckets[second] = [0, 0]
            for old in [s for s in self.buckets if s < second - RATE_WINDOW - 1]:
                del self.buckets[old]
        return bucket
