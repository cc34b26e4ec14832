"""The block pool reducer: what each physical block holds, who owns it, and every request's block table.

Pool facts live in flat lists indexed by physical block (not one object per block), so a snapshot copies a few
lists and a replay touches no allocator. A block is free, held (in some table, or released but not yet freed or
cached) or cached (kept by the prefix tree with ref count 0); `block_state` turns that into what the pool view
draws, adding `writing` (written by the current step) and `shared` (ref count above 1).
"""

from __future__ import annotations

from dataclasses import dataclass

# Block states as the pool view draws them.
FREE, USED, SHARED, CACHED, WRITING = "free", "used", "shared", "cached", "writing"

# PoolReducer.kind values
_FREE, _HELD, _CACHED = 0, 1, 2
# the hash a tail is cached under: this prefix, then the first 12 hex digits of its parent block's key
TAIL_HASH = "tail:"


@dataclass(frozen=True, slots=True)
class Tail:
    """A partly filled last block a finished or preempted request left cached (engine/core/tails.py)."""

    # its position in the sequence that left it, in blocks
    logical: int
    # the whole block before it in that sequence (-1 at position 0)
    parent: int
    cache_salt: str | None
    token_ids: tuple[int, ...]
    texts: tuple[str, ...]


class PoolReducer:
    """The pool part of `CacheState`: block_* events, block tables and the blocks the current step writes."""

    def _init_pool(self, n: int) -> None:
        self.ref = [0] * n
        # _FREE, _HELD (in some table, or released but not yet freed/cached), _CACHED
        self.kind = bytearray(n)
        # Owners of each block as an immutable tuple of (request_id, logical): snapshots copy only the list.
        self.owners: list[tuple[tuple[str, int], ...]] = [()] * n
        self.block_hash: list[str | None] = [None] * n
        self.born: list[float] = [0.0] * n
        # physical -> the radix node that holds it (kept by the tree reducer)
        self.block_node: dict[int, int] = {}
        self.writing: set[int] = set()
        self._writing_step = -1
        self.n_free = n
        self.n_cached = 0
        # request id -> physical block per logical block (-1: none)
        self.tables: dict[str, list[int]] = {}
        # physical -> the tail it holds while cached as one
        self.tails: dict[int, Tail] = {}
        # (physical, request id, logical) of the last block_released: a tail is cached right after it
        self._last_release: tuple[int, str, int] | None = None

    def _snapshot_pool(self, new) -> None:
        new.ref = list(self.ref)
        new.kind = bytearray(self.kind)
        new.owners = list(self.owners)
        new.block_hash = list(self.block_hash)
        new.born = list(self.born)
        new.block_node = dict(self.block_node)
        new.writing = set(self.writing)
        new.tables = {k: list(v) for k, v in self.tables.items()}
        new.tails = dict(self.tails)

    # ------------------------------------------------------------------ derived views
    @property
    def n_used(self) -> int:
        return self.num_blocks - self.n_free - self.n_cached

    def block_state(self, physical: int) -> str:
        kind = self.kind[physical]
        if kind != _HELD:
            return FREE if kind == _FREE else CACHED
        if physical in self.writing:
            return WRITING
        return SHARED if self.ref[physical] > 1 else USED

    def counts_by_state(self) -> dict[str, int]:
        """How many blocks are in each state `block_state` gives (what the grid draws): the legend's counts."""
        held, writing = _HELD, self.writing
        n_writing = sum(1 for p in writing if self.kind[p] == held)
        shared = sum(1 for p, r in enumerate(self.ref) if r > 1 and self.kind[p] == held and p not in writing)
        return {
            USED: self.n_used - shared - n_writing,
            SHARED: shared,
            CACHED: self.n_cached,
            FREE: self.n_free,
            WRITING: n_writing,
        }

    def block_tokens(self, physical: int) -> tuple[list[int], list[str]]:
        """The tokens a block holds: from an owner's sequence, else from its radix node."""
        bs = self.block_size
        tail = self.tails.get(physical)
        if tail is not None:
            return list(tail.token_ids), list(tail.texts)
        for rid, logical in self.owners[physical]:
            req = self.requests.get(rid)
            if req is not None:
                lo = logical * bs
                return req.token_ids[lo : lo + bs], req.texts[lo : lo + bs]
        node_id = self.block_node.get(physical)
        node = self.nodes.get(node_id) if node_id is not None else None
        if node is not None and physical in node.blocks:
            lo = node.blocks.index(physical) * bs
            return node.token_ids[lo : lo + bs], node.texts[lo : lo + bs]
        return [], []

    # ------------------------------------------------------------------ helpers
    def _set_kind(self, p: int, kind: int) -> None:
        old = self.kind[p]
        if old == kind:
            return
        if old == _FREE:
            self.n_free -= 1
        elif old == _CACHED:
            self.n_cached -= 1
        if kind == _FREE:
            self.n_free += 1
        elif kind == _CACHED:
            self.n_cached += 1
        self.kind[p] = kind

    def _set_table(self, rid: str, logical: int, physical: int, group: int | None = None) -> None:
        self._note_group(physical, group)
        tables = self._tables_of(group)
        table = tables.get(rid)
        if table is None:
            table = tables[rid] = []
        if logical >= len(table):
            table.extend([-1] * (logical + 1 - len(table)))
        table[logical] = physical

    def _drop_from_table(self, rid: str, logical: int, physical: int, group: int | None = None) -> None:
        tables = self._tables_of(group)
        table = tables.get(rid)
        if table is None or logical >= len(table) or table[logical] != physical:
            return
        table[logical] = -1
        while table and table[-1] < 0:
            table.pop()
        if not table:
            del tables[rid]

    def _drop_owner(self, p: int, rid: str, logical: int) -> bool:
        owners = self.owners[p]
        if (rid, logical) not in owners:
            return False
        self.owners[p] = tuple(o for o in owners if o != (rid, logical))
        return True

    def _mark_writing(self, rid: str, step: int, first_logical: int, last_logical: int) -> None:
        """The blocks a prefill chunk or decode of `step` writes (forgetting those of earlier steps)."""
        if step != self._writing_step:
            self.writing = set()
            self._writing_step = step
        table = self.tables.get(rid)
        if not table:
            return
        # a decode: one block
        if first_logical == last_logical:
            if first_logical < len(table) and table[first_logical] >= 0:
                self.writing.add(table[first_logical])
            return
        for logical in range(first_logical, min(last_logical, len(table) - 1) + 1):
            if table[logical] >= 0:
                self.writing.add(table[logical])

    # ------------------------------------------------------------------ events
    def _on_block_allocated(self, ev: dict) -> None:
        p, rid, logical = ev["physical"], ev["request_id"], ev["logical"]
        self._set_kind(p, _HELD)
        self.ref[p] = 1
        self.owners[p] = ((rid, logical),)
        self.block_hash[p] = None
        self.born[p] = ev["t"]
        self.block_node.pop(p, None)
        self.tails.pop(p, None)
        self._set_table(rid, logical, p, ev.get("group"))

    def _on_block_shared(self, ev: dict) -> None:
        p, rid, logical = ev["physical"], ev["request_id"], ev["logical"]
        # a hit on a cached block brings it back into use
        self._set_kind(p, _HELD)
        self.ref[p] = ev["ref_count"]
        if (rid, logical) not in self.owners[p]:
            self.owners[p] += ((rid, logical),)
        self._set_table(rid, logical, p, ev.get("group"))

    def _on_block_released(self, ev: dict) -> None:
        p, rid, logical = ev["physical"], ev["request_id"], ev["logical"]
        self._drop_owner(p, rid, logical)
        self.ref[p] = ev["ref_count"]
        self._drop_from_table(rid, logical, p, ev.get("group"))
        self.writing.discard(p)
        self._last_release = (p, rid, logical)

    def _on_block_freed(self, ev: dict) -> None:
        p = ev["physical"]
        self._set_kind(p, _FREE)
        self.ref[p] = 0
        self.owners[p] = ()
        self.block_hash[p] = None
        self.block_node.pop(p, None)
        self.tails.pop(p, None)
        self.writing.discard(p)

    def _on_block_copied(self, ev: dict) -> None:
        src, dst, rid, logical = ev["src"], ev["dst"], ev["request_id"], ev["logical"]
        if self._drop_owner(src, rid, logical):
            self.ref[src] = max(0, self.ref[src] - 1)
        if (rid, logical) not in self.owners[dst]:
            self._set_kind(dst, _HELD)
            self.owners[dst] += ((rid, logical),)
            self.ref[dst] = max(1, len(self.owners[dst]))
            self.born[dst] = ev["t"]
        self._set_table(rid, logical, dst, ev.get("group"))

    def _on_block_cached(self, ev: dict) -> None:
        p = ev["physical"]
        self._set_kind(p, _CACHED)
        self.ref[p] = 0
        self.owners[p] = ()
        self.block_hash[p] = ev["hash"]
        self.writing.discard(p)
        if ev["hash"].startswith(TAIL_HASH) and p not in self.tails:
            self._keep_tail(p)

    def _keep_tail(self, p: int) -> None:
        """Remember what the tail holds: the computed tokens of the block its request just released (a tail
        is never written again, so a tail cached anew keeps what it held)."""
        if self._last_release is None or self._last_release[0] != p:
            return
        _, rid, logical = self._last_release
        req = self.requests.get(rid)
        lo = logical * self.block_size
        if req is None or req.num_computed <= lo:
            return
        hi = min(lo + self.block_size, req.num_computed)
        # the request releases its last block first: the one before it is still in its table
        table = self.tables.get(rid, ())
        self.tails[p] = Tail(
            logical,
            table[logical - 1] if 0 < logical <= len(table) else -1,
            req.cache_salt,
            tuple(req.token_ids[lo:hi]),
            tuple(req.texts[lo:hi]),
        )

    def _on_block_evicted(self, ev: dict) -> None:
        self.evictions += 1
        p = ev["physical"]
        if self.kind[p] == _CACHED:
            self._set_kind(p, _FREE)
        self.block_hash[p] = None
        self.tails.pop(p, None)
        node_id = self.block_node.pop(p, None)
        if node_id is None:
            node_id = ev.get("node_id")
        if node_id is not None:
            # the tree reducer: the node loses this block
            self._trim_node(node_id, p, ev["seq"])
