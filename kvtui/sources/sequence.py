"""Sequence numbers of one publisher's stream: what a new message means (next, a gap, a duplicate, a restart).

A publisher numbers its batches from 0; its PUB socket drops messages for a slow or new subscriber, and its
replay endpoint keeps the last `buffer_steps` batches. So a subscriber applies batches in order, fetches what a
gap skipped from the replay endpoint, drops what it already has (a replay may run ahead of the live stream),
and reads a live number that goes back as a restart (a new process starts again at 0, with an empty cache).
"""

from __future__ import annotations

from dataclasses import dataclass

NEXT, GAP, DUPLICATE, RESTART = "next", "gap", "duplicate", "restart"


@dataclass
class SeqTracker:
    applied: int = -1  # highest sequence number applied (from the live stream or a replay)
    last_live: int | None = None  # last sequence number seen on the live stream

    def classify(self, seq: int) -> str:
        """What live message `seq` is, before it is applied. GAP: batches applied+1 .. seq-1 are missing."""
        if self.last_live is not None and seq <= self.last_live:
            return RESTART  # the live stream of one publisher only goes up
        if seq <= self.applied:
            return DUPLICATE  # a replay already delivered it
        if seq == self.applied + 1:
            return NEXT
        return GAP

    def saw_live(self, seq: int) -> None:
        self.last_live = seq

    def mark_applied(self, seq: int) -> None:
        if seq > self.applied:
            self.applied = seq

    def restart(self) -> None:
        self.applied = -1
        self.last_live = None
