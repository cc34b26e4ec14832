"""One attached worker of a fleet (a publisher's data-parallel rank): the blocks it holds and has stored and
removed, and its stored / removed rates over the last seconds of trace time. `FleetState` (kvtui/state/fleet.py)
keeps one per worker. Its blocks are counted per tier: the GPU's are `resident`."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvtui.state.fleet_tiers import GPU

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
    # tier -> blocks held there (kvtui/state/fleet_tiers.py: GPU, CPU, CPU_PINNED, STORAGE, ...)
    tiers: dict = field(default_factory=dict)
    # blocks stored (events x hashes), and per tier
    stored: int = 0
    stored_tiers: dict = field(default_factory=dict)
    removed: int = 0
    removed_tiers: dict = field(default_factory=dict)
    cleared: int = 0
    # extra physical copies of hashes it holds (each removed by a BlockRemoved of its own)
    copies: int = 0
    # blocks stored again that it already held, in a re-report (vLLM's kv_cache_report_mode=full)
    rereported: int = 0
    block_size: int | None = None
    # int(t) -> [stored, removed]
    buckets: dict = field(default_factory=dict)

    @property
    def resident(self) -> int:
        """Blocks held on the GPU."""
        return self.tiers.get(GPU, 0)

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
