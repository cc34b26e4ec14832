"""The radix tests' rig (test_radix*.py): a pool and a tree with a tiny request driver, and token sequences
of whole blocks."""

from __future__ import annotations

from engine.core.miss_explainer import PrefixMatch
from engine.trace import TraceSink
from tests.helpers.model_free import model_free_manager

BS = 4


class Rig:
    """A pool + tree and a tiny request driver that calls them the way the engine does."""

    def __init__(self, num_blocks: int = 16, policy: str = "lru", block_size: int = BS):
        self.events: list[dict] = []
        self.trace = TraceSink(clock=lambda: 0.0)
        self.trace.listeners.append(self.events.append)
        self.manager = model_free_manager(num_blocks, block_size, self.trace, policy)
        self.pool = self.manager.pool
        self.cache = self.manager.prefix_cache.radix
        self.requests: dict[str, tuple[list[int], list[int], object, str | None]] = {}

    def admit(self, rid: str, tokens: list[int], salt: str | None = None) -> PrefixMatch:
        """Admission: match, share the cached prefix, acquire (lock), allocate the rest, insert full blocks."""
        match = self.cache.match(tokens, salt)
        table = list(match.blocks)
        for logical, physical in enumerate(table):
            self.pool.share(physical, rid, logical)
        node = self.cache.acquire(match, rid)
        for logical in range(len(table), self.pool.blocks_for(len(tokens))):
            table.append(self.manager.allocate_block(rid, logical))
        node = self.cache.insert(tokens, table, salt, rid, locked=node)
        self.requests[rid] = (list(tokens), table, node, salt)
        return match

    def finish(self, rid: str) -> None:
        tokens, table, node, salt = self.requests.pop(rid)
        node = self.cache.insert(tokens, table, salt, rid, locked=node)
        self.cache.unlock(node)
        self.manager.release_table(table, rid)

    def run(self, rid: str, tokens: list[int], salt: str | None = None) -> PrefixMatch:
        match = self.admit(rid, tokens, salt)
        self.finish(rid)
        return match

    def types(self, since: int = 0) -> list[str]:
        return [e["type"] for e in self.events[since:]]

    def of_type(self, etype: str) -> list[dict]:
        return [e for e in self.events if e["type"] == etype]


def seq(*blocks: int, extra: tuple[int, ...] = ()) -> list[int]:
    """Tokens: one block of BS copies of each value given, then `extra` tokens."""
    return [v for v in blocks for _ in range(BS)] + list(extra)
