"""Block keys into prefix-tree node ids in compact arrays, a batch of requests at a time (the one-pass's
interning: onepass.py, curve.py).

    table = PrefixTable()
    nodes = table.intern(keys, starts)     # keys: int64, flat over the batch; starts: each request's first

A node is a (parent node, key) pair, so the same id means the same prefix: chained keys (vLLM's block hashes,
Mooncake's hash ids) and unchained ones (Qwen-Bailian's per-block ids) alike. The pairs live in one
open-addressing hash table of numpy arrays (a 64-bit key and three 32-bit ids a slot: 29 to 57 bytes a distinct
block, at most 70% full), filled a depth at a time: every request's block d finds its parent among the blocks
d - 1 just interned, so a batch costs a few numpy calls per depth, not a Python call per block.

`prefix_hashes(keys, starts, seed)`: a 64-bit hash of each block's whole prefix (what SHARDS samples by,
sampled.py), computed for a batch at once as a polynomial over the keys.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PrefixTable", "prefix_hashes", "mix64"]

EMPTY = -2
MAX_LOAD = 0.7
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# an odd multiplier and its inverse modulo 2**64 (the prefix polynomial)
_P = 0xD6E8FEB86659FD93
_P_INV = pow(_P, -1, 1 << 64)


def mix64(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over uint64 values (wrapping arithmetic)."""
    x = values.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def depths_of(starts: np.ndarray, total: int) -> np.ndarray:
    """The depth of every block of a flat batch (0 = a request's first block)."""
    counts = np.diff(starts)
    return np.arange(total, dtype=np.int64) - np.repeat(starts[:-1], counts)


class PrefixTable:
    def __init__(self, capacity: int = 1 << 12):
        self.count = 0
        self._allocate(capacity)

    def __len__(self) -> int:
        return self.count

    @property
    def nbytes(self) -> int:
        return self._keys.nbytes + self._parents.nbytes + self._nodes.nbytes + self._claim.nbytes

    def _allocate(self, capacity: int) -> None:
        self._keys = np.zeros(capacity, dtype=np.int64)
        self._parents = np.full(capacity, EMPTY, dtype=np.int32)
        self._nodes = np.zeros(capacity, dtype=np.int32)
        # scratch: which pair of a probing round claims each free slot
        self._claim = np.empty(capacity, dtype=np.int32)

    def _first_claims(self, at: np.ndarray, free: np.ndarray) -> np.ndarray:
        """The pairs (indices into `at`, ascending) that take a free slot this round, one a slot: a scatter
        and a read-back, not a sort (np.unique here was most of a batch's time)."""
        wanting = np.flatnonzero(free)
        slots = at[wanting]
        self._claim[slots] = wanting
        return wanting[self._claim[slots] == wanting]

    def _slots(self, parents: np.ndarray, keys: np.ndarray) -> np.ndarray:
        mixed = mix64(keys.view(np.uint64) ^ ((parents.astype(np.int64) + 2).view(np.uint64) * _GOLDEN))
        return (mixed & np.uint64(len(self._keys) - 1)).astype(np.int64)

    def _grow(self, incoming: int) -> None:
        need = self.count + incoming
        capacity = len(self._keys)
        if need <= capacity * MAX_LOAD:
            return
        while need > capacity * MAX_LOAD:
            capacity *= 2
        used = self._parents != EMPTY
        keys, parents, nodes = self._keys[used], self._parents[used], self._nodes[used]
        self._allocate(capacity)
        self._place(parents, keys, nodes)

    def _place(self, parents, keys, nodes) -> None:
        """Put pairs known to be absent and distinct into the table."""
        slots = self._slots(parents, keys)
        pending = np.arange(len(keys))
        mask = len(self._keys) - 1
        while len(pending):
            at = slots[pending]
            free = self._parents[at] == EMPTY
            # one pair per free slot this round; the others probe on
            first = self._first_claims(at, free)
            won = pending[first]
            self._keys[at[first]] = keys[won]
            self._parents[at[first]] = parents[won]
            self._nodes[at[first]] = nodes[won]
            keep = np.ones(len(pending), dtype=bool)
            keep[first] = False
            pending = pending[keep]
            slots[pending] = (slots[pending] + 1) & mask

    def lookup_or_add(self, parents: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """The node of each (parent, key) pair; pairs not seen before become new nodes."""
        self._grow(len(keys))
        out = np.empty(len(keys), dtype=np.int64)
        slots = self._slots(parents, keys)
        pending = np.arange(len(keys))
        mask = len(self._keys) - 1
        while len(pending):
            at = slots[pending]
            stored = self._parents[at]
            found = (stored == parents[pending]) & (self._keys[at] == keys[pending])
            out[pending[found]] = self._nodes[at[found]]
            free = stored == EMPTY
            # a free slot: one pair probing it takes it (an equal pair finds it next round)
            first = self._first_claims(at, free)
            won = pending[first]
            new = np.arange(self.count, self.count + len(won), dtype=np.int64)
            self.count += len(won)
            self._keys[at[first]] = keys[won]
            self._parents[at[first]] = parents[won]
            self._nodes[at[first]] = new
            out[won] = new
            moved = ~(found | free)
            slots[pending[moved]] = (at[moved] + 1) & mask
            keep = ~found
            keep[first] = False
            pending = pending[keep]
        return out

    def intern(self, keys: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The node id of every block of a flat batch: request i is keys[starts[i]:starts[i + 1]]."""
        total = len(keys)
        nodes = np.empty(total, dtype=np.int64)
        if not total:
            return nodes
        depth = depths_of(starts, total)
        order = np.argsort(depth, kind="stable")
        bounds = np.searchsorted(depth[order], np.arange(int(depth.max()) + 2))
        for d in range(len(bounds) - 1):
            at = order[bounds[d] : bounds[d + 1]]
            parents = np.full(len(at), -1, dtype=np.int64) if d == 0 else nodes[at - 1]
            nodes[at] = self.lookup_or_add(parents, keys[at])
        return nodes


_powers: dict[str, np.ndarray] = {}


def _power_table(name: str, base: int, length: int) -> np.ndarray:
    table = _powers.get(name)
    if table is None or len(table) < length:
        size = max(length, 1024, 2 * len(table) if table is not None else 0)
        values, x = [], 1
        for _ in range(size):
            values.append(x)
            x = (x * base) & ((1 << 64) - 1)
        table = _powers[name] = np.array(values, dtype=np.uint64)
    return table


def prefix_hashes(keys: np.ndarray, starts: np.ndarray, seed: int = 0) -> np.ndarray:
    """A 64-bit hash of each block's prefix (its key and every key before it in its request), uint64:
    sum over i <= d of mix(key_i) * P**(d - i), mixed once more with the depth."""
    total = len(keys)
    if not total:
        return np.zeros(0, dtype=np.uint64)
    depth = depths_of(starts, total)
    top = int(depth.max()) + 1
    power, inverse = _power_table("p", _P, top), _power_table("inv", _P_INV, top)
    salted = keys.view(np.uint64) ^ mix64(np.array([seed & ((1 << 64) - 1)], dtype=np.uint64))[0]
    terms = mix64(salted) * inverse[depth]
    running = np.cumsum(terms, dtype=np.uint64)
    # the running sum from each request's own start
    before = np.concatenate([np.zeros(1, dtype=np.uint64), running])[np.repeat(starts[:-1], np.diff(starts))]
    return mix64((running - before) * power[depth] + depth.astype(np.uint64) * _GOLDEN)
