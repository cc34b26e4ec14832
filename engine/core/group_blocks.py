"""The KV-cache groups besides the table group, for window_layout="paged" (engine/models/kv_groups.py): each
request's block table per group, the blocks each group keeps under their hashes, and vLLM's hybrid hit rule.
Torch-free, in block ids.

vLLM v1's hybrid layout (single_type_kv_cache_manager.py, kv_cache_coordinator.py), as kvtui keeps it:
- every group takes its blocks from the one BlockPool; a block serves one group at a time, and every block
  event names its group (`group`);
- a full block enters its group's hash map once computed (`block_stored`), as the table group's enter the tree;
  a window group stores only the blocks it retains (vLLM's prefix_cache_retention_interval, 0 by default:
  the run a later hit resumes at before the prompt's last token and before the shared-prefix junction, where
  the tree served more than the groups; hybrid_hit.py's `retained_blocks`, the rule the what-if twin keeps);
- a sliding-window group releases the blocks wholly before the window of the next token to compute
  (positions below num_computed - W + 1, `skip`); a released block with a hash stays cached (`block_cached`)
  until evicted, oldest first (`block_evicted`), one without is freed (`block_freed`), and its place in the
  table becomes None (vLLM's null block);
- a prefix hit is the longest that every group serves (`longest_hit`): the tree bounds it (the table group
  needs every block); another full group needs every block too; a window group needs only the
  ceil((W - 1) / block_size) blocks before the hit point, the rightmost such run below the bound (or the run
  of cached blocks from the start, when it is shorter); a group that serves less lowers the bound for all, and
  the groups are asked again until none lowers it.
The table group itself (Request.block_table and the prefix tree) stays the KV-cache manager's. Where vLLM
evicts from one queue in the order blocks were freed, whatever their group, the manager evicts these groups'
cached blocks first (oldest first), then the tree's choice.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from engine.core.blocks import BlockPool
from engine.core.hybrid_hit import contiguous_blocks, group_hit, retained_blocks
from engine.models.kv_groups import FULL, INDEX, SLIDING, KVGroup
from engine.trace.writer import TraceSink

# (request id, logical, group) -> a free block (the manager's allocate_block: it evicts first when none is free)
Allocate = Callable[[str, int, int], int]


class GroupTrace:
    """The trace as the table group's pool and tree write it: block events name the table group."""

    def __init__(self, trace: TraceSink, group: int):
        self.trace = trace
        self.group = group

    def emit(self, etype: str, **fields) -> dict:
        if etype.startswith("block_") and "group" not in fields:
            fields["group"] = self.group
        return self.trace.emit(etype, **fields)

    def __getattr__(self, name):
        return getattr(self.trace, name)


class GroupBlocks:
    def __init__(
        self,
        groups: list[KVGroup],
        table_group: int,
        pool: BlockPool,
        block_size: int,
        trace: TraceSink,
        retention: int | None = 0,
    ):
        self.groups = groups
        self.table_group = table_group
        self.others = [g for g in range(len(groups)) if g != table_group]
        self.pool = pool
        self.block_size = block_size
        self.trace = trace
        # vLLM's prefix_cache_retention_interval: which blocks a window group caches (hybrid_hit.py's
        # retained_blocks; None: every block)
        self.retention = retention
        # request id -> group -> physical block per logical block (None: released, before the window)
        self.tables: dict[str, dict[int, list[int | None]]] = {}
        # blocks of each request that were offered to the hash maps
        self.stored: dict[str, int] = {}
        # group -> block hash -> physical; physical -> (group, hash)
        self.by_hash: dict[int, dict[str, int]] = {g: {} for g in self.others}
        self.hash_of: dict[int, tuple[int, str]] = {}
        # cached blocks nobody references, oldest first (evicted in this order)
        self.evictable: OrderedDict[int, None] = OrderedDict()

    @classmethod
    def none(cls, pool: BlockPool, block_size: int, trace: TraceSink) -> GroupBlocks:
        """One group: nothing besides the table group."""
        return cls([KVGroup(INDEX)], 0, pool, block_size, trace)

    @property
    def enabled(self) -> bool:
        return bool(self.others)

    @property
    def count(self) -> int:
        """Groups in all, the table group included: a new block position takes a block in each."""
        return 1 + len(self.others)

    def header_fields(self) -> dict:
        """The trace header's `kv_groups` and `table_group` (window_layout="paged"; nothing with one group)."""
        if not self.enabled:
            return {}
        return {"kv_groups": [group.to_json() for group in self.groups], "table_group": self.table_group}

    def table(self, request_id: str, group: int) -> list[int | None]:
        return self.tables.setdefault(request_id, {}).setdefault(group, [])

    # --- the hit rule -------------------------------------------------------------------------------------
    def longest_hit(self, keys: list[str], bound: int) -> tuple[int, dict[int, list[int | None]], int | None]:
        """Blocks every group serves of a prompt whose block hashes are `keys`, at most `bound` (what the tree
        serves); each group's blocks for them (None: a window group does not need that block); and the group
        that last lowered the hit (None: the tree's bound stands)."""
        hit, found, limiting = bound, {}, None
        while True:
            current = hit
            for g in self.others:
                found[g] = self._group_hit(g, keys, current)
                if len(found[g]) < current:
                    limiting = g
                current = len(found[g])
            if current >= hit:
                return hit, found, limiting
            hit = current

    def junction(self, bound: int, hit: int) -> int:
        """vLLM's shared-prefix junction, in tokens: where the full group (the tree, `bound` blocks) found more
        than every group serves (`hit` blocks); 0 when it did not, or when no group attends fully."""
        full = self.groups[self.table_group].kind == FULL
        return bound * self.block_size if full and bound > hit else 0

    def _group_hit(self, group: int, keys: list[str], bound: int) -> list[int | None]:
        """The group's blocks for the longest hit it serves on its own, at most `bound` blocks (vLLM's rule for
        one group, engine/core/hybrid_hit.py), None where a window group does not need the block."""
        cached = self.by_hash[group]
        rule = self.groups[group]
        size = self.block_size
        blocks = group_hit(rule, lambda i: keys[i] in cached, bound * size, size, size) // size
        first = max(0, blocks - contiguous_blocks(rule.window, size)) if rule.kind == SLIDING else 0
        return [None] * first + [cached[key] for key in keys[first:blocks]]

    def share_hit(self, request_id: str, found: dict[int, list[int | None]], blocks: int) -> None:
        """The request takes the first `blocks` of each group's hit."""
        for g, hit in found.items():
            table = self.table(request_id, g)
            for logical, physical in enumerate(hit[:blocks]):
                if physical is not None:
                    self.evictable.pop(physical, None)
                    self.pool.share(physical, request_id, logical, group=g)
                table.append(physical)

    # --- a request's blocks -------------------------------------------------------------------------------
    def allocate(self, request_id: str, blocks: int, allocate: Allocate, before_table: bool) -> None:
        """The groups before the table group (`before_table`) or after it grow their tables to `blocks` blocks:
        vLLM allocates group by group in group order, the table group in its place."""
        for g in self.others:
            if (g < self.table_group) != before_table:
                continue
            table = self.table(request_id, g)
            while len(table) < blocks:
                table.append(allocate(request_id, len(table), g))

    def skip(self, request_id: str, num_computed: int) -> None:
        """Release each window group's blocks that lie wholly before the window of position `num_computed`."""
        for g in self.others:
            window = self.groups[g].window
            table = self.tables.get(request_id, {}).get(g)
            if window is None or not table:
                continue
            skipped = min(max(0, num_computed - window + 1) // self.block_size, len(table))
            for logical in range(skipped):
                if table[logical] is not None:
                    self._release(table[logical], request_id, logical, g)
                    table[logical] = None

    def copy_first(self, request_id: str, logical: int, num_tokens: int, allocate: Allocate) -> None:
        """Before a write into block `logical`: each group's shared or cached block there is copied first."""
        for g in self.others:
            table = self.tables.get(request_id, {}).get(g, [])
            src = table[logical] if logical < len(table) else None
            if src is None or (self.pool.ref_counts[src] == 1 and src not in self.hash_of):
                continue
            dst = allocate(request_id, logical, g)
            self.pool.copy(src, dst, request_id, logical, num_tokens, group=g)
            table[logical] = dst
            self._release(src, request_id, logical, g)

    def store(self, request_id: str, keys: list[str], full: int, boundaries: tuple[int, ...]) -> None:
        """Blocks [.., full) of the request are computed: each group's enters its hash map (the first block
        stored under a hash stays the one a hit finds, as in vLLM), a window group's only where it retains them
        (`retained_blocks`: the run a later hit resumes at before each of `boundaries`, the prompt's last token
        and the shared-prefix junction; the rest are freed when released)."""
        done = self.stored.get(request_id, 0)
        if full <= done:
            return
        self.stored[request_id] = full
        for g in self.others:
            table = self.tables.get(request_id, {}).get(g, [])
            kept = retained_blocks(
                self.groups[g], self.block_size, boundaries, self.block_size, self.retention
            )
            for logical in range(done, min(full, len(table))):
                physical, key = table[logical], keys[logical]
                if physical is None or physical in self.hash_of or key in self.by_hash[g]:
                    continue
                if kept is not None and not kept(logical):
                    continue
                self.by_hash[g][key] = physical
                self.hash_of[physical] = (g, key)
                self.trace.emit(
                    "block_stored",
                    physical=physical,
                    hash=key,
                    group=g,
                    request_id=request_id,
                    logical=logical,
                )

    def cut(self, request_id: str, keep: int) -> int:
        """An edit keeps [0, keep): the largest block boundary <= keep at which every window group still holds
        the blocks its window reads; the blocks from there on are released. Returns that boundary."""
        tables = self.tables.get(request_id, {})
        bs = self.block_size
        point = keep - keep % bs
        while point > 0 and not all(
            None not in tables.get(g, [])[max(0, point - self.groups[g].window + 1) // bs : point // bs]
            for g in self.others
            if self.groups[g].window is not None
        ):
            point -= bs
        for g, table in tables.items():
            self._release_from(request_id, g, table, point // bs)
        self.stored[request_id] = min(self.stored.get(request_id, 0), point // bs)
        return point

    def fork(self, parent_id: str, child_id: str) -> None:
        for g, table in self.tables.get(parent_id, {}).items():
            mine = self.table(child_id, g)
            for logical, physical in enumerate(table):
                if physical is not None:
                    self.pool.share(physical, child_id, logical, group=g)
                mine.append(physical)
        self.stored[child_id] = self.stored.get(parent_id, 0)

    def free(self, request_id: str) -> None:
        """Finish or preemption: every group's blocks go back, last first (those with a hash stay cached)."""
        for g, table in self.tables.pop(request_id, {}).items():
            self._release_from(request_id, g, table, 0)
        self.stored.pop(request_id, None)

    def _release_from(self, request_id: str, group: int, table: list[int | None], start: int) -> None:
        for logical in range(len(table) - 1, start - 1, -1):
            if table[logical] is not None:
                self._release(table[logical], request_id, logical, group)
        del table[start:]

    def _release(self, physical: int, request_id: str, logical: int, group: int) -> None:
        if self.pool.release(physical, request_id, logical, group=group) > 0:
            return
        if physical in self.hash_of:
            self.evictable[physical] = None
            self.trace.emit("block_cached", physical=physical, hash=self.hash_of[physical][1], group=group)
        else:
            self.pool.free_block(physical, group=group)

    # --- cached blocks ------------------------------------------------------------------------------------
    def num_evictable(self) -> int:
        return len(self.evictable)

    def evict_one(self) -> int | None:
        """The oldest cached block leaves its hash map; the caller puts it on the free list."""
        if not self.evictable:
            return None
        physical, _ = self.evictable.popitem(last=False)
        group, key = self.hash_of.pop(physical)
        del self.by_hash[group][key]
        self.trace.emit("block_evicted", physical=physical, hash=key, policy="lru", node_id=-1, group=group)
        return physical
