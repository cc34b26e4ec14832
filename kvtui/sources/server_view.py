"""What vLLM's KV-event batches say about its cache, in the twin's own block keys: the events file the proxy
keeps beside its log (kvtui/sources/proxy_events.py), folded batch by batch.

vLLM's block hashes are its own (and salted by its own rule); a stored block also carries its parent's hash and
its token ids, so each one is given the twin's key (engine/core/hashing.py: the chained content of the token
ids from the root, salted by the store's cache salt when the wire carries one). A hash stored before the stream
began has no known chain: its blocks, and their children, are left out. vLLM may hold two physical copies of
one hash (a block-aligned prompt recomputed); a key stays resident while any copy does. A hash no copy holds
any more is forgotten, so a long-running proxy's view stays the size of the pool.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from engine.core.hashing import chain_hash, root_hash, salted


@dataclass
class Step:
    """One published batch: one engine step that stored or removed blocks."""

    index: int
    # seconds, on the log's clock (the first request forwarded at 0)
    t: float
    # twin keys stored and removed by the step, in the wire's order
    stored: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    # `stored` as the wire grouped it: one BlockStored per request and step, a chain of its blocks
    runs: list[list[str]] = field(default_factory=list)
    cleared: bool = False


class ServerView:
    """vLLM's resident blocks as twin keys, folded one batch at a time."""

    def __init__(self):
        # vLLM hash (hex) -> (the twin's salt-free content, key)
        self._known: dict[str, tuple[str, str]] = {}
        self._copies: Counter = Counter()
        # twin key -> physical copies held
        self.resident: Counter = Counter()

    def fold(self, batch: dict, index: int, t0: float) -> Step:
        step = Step(index, batch["ts"] - t0, cleared=bool(batch.get("cleared")))
        if step.cleared:
            self._copies.clear()
            self.resident.clear()
        for stored in batch.get("stored", ()):
            hashes, tokens = stored["hashes"], stored.get("tokens") or []
            if not hashes or len(tokens) % len(hashes):
                continue
            size = len(tokens) // len(hashes)
            parent = stored.get("parent")
            if parent is None:
                content = root_hash(None)
            elif parent in self._known:
                content = self._known[parent][0]
            else:
                continue
            run: list[str] = []
            step.runs.append(run)
            for i, h in enumerate(hashes):
                content = chain_hash(content, tokens[i * size : (i + 1) * size])
                key = salted(content, stored.get("salt"))
                self._known[h] = (content, key)
                self._copies[h] += 1
                self.resident[key] += 1
                step.stored.append(key)
                run.append(key)
        for h in batch.get("removed", ()):
            if not self._copies.get(h):
                continue
            self._copies[h] -= 1
            key = self._known[h][1]
            if not self._copies[h]:
                # gone: a block stored later under it would have stored it again first
                del self._copies[h], self._known[h]
            self.resident[key] -= 1
            if not self.resident[key]:
                del self.resident[key]
            step.removed.append(key)
        return step


def server_steps(batches: list[dict], t0: float) -> list[Step]:
    """Each batch as a step, in the engine's time order (a step's `stored` and `removed` list a key once per
    physical copy, so a Counter of them is the resident set)."""
    view = ServerView()
    ordered = sorted(batches, key=lambda b: (b["ts"], b.get("seq") or 0))
    return [view.fold(batch, index, t0) for index, batch in enumerate(ordered)]
