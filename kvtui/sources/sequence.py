"""Sequence numbers of one publisher's stream: what a new message means (next, a gap, a duplicate, a restart).

A publisher numbers its batches from 0; its PUB socket drops messages for a slow or new subscriber, and its
replay endpoint keeps the last `buffer_steps` batches. So a subscriber applies batches in order, fetches what a
gap skipped from the replay endpoint, drops what it already has (a replay may run ahead of the live stream),
and reads a live number that goes back as a restart (a new process starts again at 0, with an empty cache).
A number it already applied is a restart too when its batch is newer than the last one applied (a restart
right after a replay: no live number yet to go back from); else a duplicate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvtui.sources.endpoints import Source

NEXT, GAP, DUPLICATE, RESTART = "next", "gap", "duplicate", "restart"


@dataclass
class SeqTracker:
    # highest sequence number applied (from the live stream or a replay)
    applied: int = -1
    # last sequence number seen on the live stream
    last_live: int | None = None
    # the publisher's timestamp of the batch `applied`
    applied_ts: float | None = None

    def classify(self, seq: int, ts: float | None = None) -> str:
        """What live message `seq` (batch timestamp `ts`) is, before it is applied. GAP: batches applied+1 ..
        seq-1 are missing."""
        if self.last_live is not None and seq <= self.last_live:
            # the live stream of one publisher only goes up
            return RESTART
        if seq <= self.applied:
            if ts is not None and self.applied_ts is not None and ts > self.applied_ts:
                # an old number on a newer batch: a new process
                return RESTART
            # a replay already delivered it
            return DUPLICATE
        if seq == self.applied + 1:
            return NEXT
        return GAP

    def saw_live(self, seq: int) -> None:
        self.last_live = seq

    def mark_applied(self, seq: int, ts: float | None = None) -> None:
        if seq > self.applied:
            self.applied = seq
            self.applied_ts = ts

    def restart(self) -> None:
        self.applied = -1
        self.last_live = None
        self.applied_ts = None


@dataclass
class Stream:
    """One publisher's sequence of batches (a source; with --bind, one peer and topic on the bound socket)."""

    source: Source
    name: str
    tracker: SeqTracker = field(default_factory=SeqTracker)
    # rank -> worker id
    workers: dict = field(default_factory=dict)
