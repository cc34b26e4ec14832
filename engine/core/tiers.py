"""The tiers below the device pool: host memory (and, in what-if runs, disk), each a fixed number of block slots.

An exclusive LRU hierarchy, the shape of vLLM's CPU offloading and SGLang's HiCache:
    demote   the device pool evicts a cached whole block: its K/V are copied into a host slot instead of dropped
             (`block_offloaded`); a full host tier first moves its oldest block down to disk, or drops it when
             there is no tier below (`host_evicted`, as `block_evicted` for the device)
    promote  a prefix match that runs past the device tree into lower tiers loads those blocks back into device
             blocks before the request's forward (`block_loaded`); the slot is free again (a block lives in one
             tier at a time)
A block's place in a lower tier is its chained key (engine/core/hashing.py), which names its whole prefix: a run
of keys found tier by tier is a usable prefix. Children leave the device before their parents (only leaves are
evicted), so within a tier a parent always arrived after its children and oldest-first eviction never strands a
child behind a missing parent. Together the tiers behave as one LRU of the summed capacity whose most recent
part is the device: a block at stack distance d is on the device when d < C1, on host when C1 <= d < C1 + C2.

Torch-free like the rest of the core: a move is a `BlockCopy` between tiers on the pool's copy list, which the
worker applies in order with the copy-on-writes (engine/worker/tier_tensors.py).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.core.blocks import BlockCopy, BlockPool
from engine.core.hashing import root_key
from engine.trace.writer import TraceSink

DEVICE = "device"
LOWER_TIERS = ("host", "disk")


@dataclass
class TierBlock:
    """A whole block held in a lower tier: enough to find it again, put it back in the tree and draw it."""

    key: str
    # the key before it (the root key for block 0): where the tree view hangs it
    parent_key: str
    content: str
    token_ids: list[int]
    cache_salt: str | None
    # its position in the sequence, in blocks
    logical: int
    tier: str = ""
    slot: int = -1


def last_block_of(node, block_size: int) -> TierBlock:
    """A prefix tree node's last block (engine/core/tree_node.py) as a lower tier keeps it."""
    i = len(node.blocks) - 1
    if i:
        parent_key = node.keys[i - 1]
    elif node.parent.parent is not None:
        parent_key = node.parent.keys[-1]
    else:
        # the tree's root holds no block: block 0 chains on the salt's root key
        parent_key = root_key(node.cache_salt)
    return TierBlock(
        node.keys[i],
        parent_key,
        node.contents[i],
        node.token_ids[i * block_size : (i + 1) * block_size],
        node.cache_salt,
        node.depth + i,
    )


class TierStore:
    """One lower tier: free slots and the blocks it holds, oldest arrival first."""

    def __init__(self, name: str, num_slots: int):
        self.name = name
        self.free: deque[int] = deque(range(num_slots))
        self.blocks: OrderedDict[str, TierBlock] = OrderedDict()


class LowerTiers:
    """Host (and disk) below a device pool: where evicted blocks go and where matches continue."""

    def __init__(
        self,
        capacities: Sequence[tuple[str, int]],
        pool: BlockPool,
        trace: TraceSink,
        bytes_per_block: int = 0,
        token_text: Callable[[int], str] | None = str,
    ):
        self.stores = [TierStore(name, n) for name, n in capacities if n > 0]
        self.pool, self.trace = pool, trace
        self.bytes_per_block = bytes_per_block
        self.token_text = token_text
        # parent key -> keys held below it in some lower tier (the explainer's continuations)
        self._children: dict[str, set[str]] = {}
        self.loaded_bytes = {store.name: 0 for store in self.stores}

    @classmethod
    def for_config(cls, config, shape, pool: BlockPool, trace: TraceSink, token_text) -> LowerTiers | None:
        """The tiers an EngineConfig asks for (None: one tier), sized in blocks of the pool's stored bytes."""
        if not config.lower_tiers():
            return None
        stored = shape.with_kv_dtype(config.kv_dtype) if config.kv_dtype else shape
        return cls(config.lower_tiers(), pool, trace, stored.kv_bytes_per_block(pool.block_size), token_text)

    @property
    def names(self) -> tuple[str, ...]:
        """Every tier's name, the device first."""
        return (DEVICE, *(store.name for store in self.stores))

    # --- queries ------------------------------------------------------------------------------------------
    def holding(self, key: str) -> TierStore | None:
        for store in self.stores:
            if key in store.blocks:
                return store
        return None

    def find(self, keys: Sequence[str]) -> list[TierBlock]:
        """The blocks of `keys`, from the first, as long as some lower tier holds each one."""
        found = []
        for key in keys:
            store = self.holding(key)
            if store is None:
                break
            found.append(store.blocks[key])
        return found

    def continuations(self, parent_key: str) -> list[TierBlock]:
        """Blocks held below `parent_key` (what a match could have continued with)."""
        out = []
        for key in self._children.get(parent_key, ()):
            store = self.holding(key)
            if store is not None:
                out.append(store.blocks[key])
        return out

    def slots(self) -> dict[str, dict[int, str]]:
        """Each tier's occupied slots: slot -> key (the oracle compares it with the replayed state)."""
        return {store.name: {b.slot: key for key, b in store.blocks.items()} for store in self.stores}

    # --- demotion -----------------------------------------------------------------------------------------
    def offload(self, block: TierBlock, physical: int) -> list[tuple[str, dict, str]]:
        """A device block the pool just evicted: copy it into the top lower tier (making room there first).
        Returns the blocks that left the last tier for it: (key, their `host_evicted` event, policy)."""
        gone: list[tuple[str, dict, str]] = []
        self._put(0, block, DEVICE, physical, gone)
        return gone

    def _put(self, level: int, block: TierBlock, src_tier: str, src: int, gone: list) -> bool:
        """Copy `block` from `src` of `src_tier` into this level; False when every slot here is being loaded
        back by the admission that moved the block (it is dropped)."""
        store = self.stores[level]
        if not store.free:
            if not store.blocks:
                return False
            self._make_room(level, gone)
        slot = store.free.popleft()
        self.pool.pending_copies.append(BlockCopy(src, slot, self.pool.block_size, src_tier, store.name))
        block.tier, block.slot = store.name, slot
        store.blocks[block.key] = block
        self._children.setdefault(block.parent_key, set()).add(block.key)
        self.trace.emit(
            "block_offloaded",
            hash=block.key,
            parent_hash=block.parent_key,
            src_tier=src_tier,
            src=src,
            tier=store.name,
            slot=slot,
            logical=block.logical,
            token_ids=list(block.token_ids),
            texts=None if self.token_text is None else [self.token_text(t) for t in block.token_ids],
        )
        return True

    def _make_room(self, level: int, gone: list) -> None:
        """The tier's oldest block moves one tier down, or leaves the hierarchy from the last one (into
        `gone`)."""
        store = self.stores[level]
        key, oldest = next(iter(store.blocks.items()))
        del store.blocks[key]
        slot = oldest.slot
        self._forget(oldest)
        # its slot is free only once the copy out of it is on the list
        moved = level + 1 < len(self.stores) and self._put(level + 1, oldest, store.name, slot, gone)
        store.free.append(slot)
        if moved:
            return
        event = self.trace.emit("host_evicted", hash=key, tier=store.name, slot=slot, reason="capacity")
        gone.append((key, event, f"lru ({store.name})"))

    def _forget(self, block: TierBlock) -> None:
        siblings = self._children.get(block.parent_key)
        if siblings is not None:
            siblings.discard(block.key)
            if not siblings:
                del self._children[block.parent_key]

    # --- promotion and duplicates -------------------------------------------------------------------------
    def claim(self, blocks: Sequence[TierBlock]) -> None:
        """Take blocks about to be loaded out of their tiers' LRU order (so the allocations that make room for
        them cannot demote or drop them); their slots stay taken until `load` has copied them out."""
        for block in blocks:
            del self._store(block.tier).blocks[block.key]

    def _store(self, name: str) -> TierStore:
        return next(store for store in self.stores if store.name == name)

    def load(self, block: TierBlock, physical: int, request_id: str) -> None:
        """Copy a claimed block into device block `physical` (just allocated for the request) and free its slot:
        the block lives on the device again."""
        store = self._store(block.tier)
        self.pool.pending_copies.append(
            BlockCopy(block.slot, physical, self.pool.block_size, store.name, DEVICE)
        )
        store.free.append(block.slot)
        self._forget(block)
        self.loaded_bytes[store.name] += self.bytes_per_block
        self.trace.emit(
            "block_loaded",
            hash=block.key,
            tier=store.name,
            slot=block.slot,
            physical=physical,
            request_id=request_id,
            logical=block.logical,
            bytes=self.bytes_per_block,
        )

    def discard(self, key: str) -> None:
        """The device tree holds `key` again (a request computed it anew): a lower copy would be a second one."""
        store = self.holding(key)
        if store is None:
            return
        block = store.blocks.pop(key)
        store.free.append(block.slot)
        self._forget(block)
        self.trace.emit("host_evicted", hash=key, tier=store.name, slot=block.slot, reason="on_device")
