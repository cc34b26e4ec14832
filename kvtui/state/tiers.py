"""The lower tiers reducer: the host (and, in what-if runs, disk) slots below the device pool, what moved
between the tiers and the hit tokens each tier served.

A lower tier is a fixed number of block slots (the header's config: host_blocks, disk_blocks). A block the
device evicts is copied into a slot (`block_offloaded`), leaves it when a prefix match loads it back
(`block_loaded`) or when the tier drops it (`host_evicted`: the tier's oldest, or computed again on the
device); a block moved from host down to disk is a `block_offloaded` whose source is a host slot. A slot
records enough to draw the block: its hash, its parent's hash (where the tree view hangs it), its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

# the tiers below the device, top first, as the header's config names their sizes
LOWER_TIERS = (("host", "host_blocks"), ("disk", "disk_blocks"))
DEVICE = "device"


@dataclass(frozen=True, slots=True)
class TierSlot:
    """A whole block held in a lower tier's slot (immutable: snapshots share it)."""

    hash: str
    # the block before it (a root key for block 0)
    parent_hash: str
    token_ids: tuple[int, ...]
    texts: tuple[str, ...]
    # its position in the sequence, in blocks
    logical: int
    # trace time it arrived in this tier
    arrived: float


@dataclass(slots=True)
class TierMoves:
    """What went in and out of one lower tier, cumulative."""

    # blocks copied in (from the device, or from the tier above)
    offloaded: int = 0
    offloaded_bytes: int = 0
    # blocks loaded back into the device
    loaded: int = 0
    loaded_bytes: int = 0
    # blocks moved down to the next tier
    demoted: int = 0
    # blocks dropped: the tier's oldest with no room below / computed again on the device
    dropped_capacity: int = 0
    dropped_on_device: int = 0

    def copy(self) -> TierMoves:
        return TierMoves(*(getattr(self, name) for name in self.__slots__))


class TiersReducer:
    """The lower tiers part of `CacheState`: block_offloaded / block_loaded / host_evicted and hits by tier."""

    def _init_tiers(self, header: dict) -> None:
        config = header.get("config") or {}
        # tier -> its slots (0: not configured, though events may still name it)
        self.tier_capacity: dict[str, int] = {
            name: int(config.get(key) or 0) for name, key in LOWER_TIERS if config.get(key)
        }
        self.tier_slots: dict[str, dict[int, TierSlot]] = {name: {} for name in self.tier_capacity}
        # hash -> (tier, slot): where a block lives below the device
        self.tier_of: dict[str, tuple[str, int]] = {}
        self.tier_moves: dict[str, TierMoves] = {name: TierMoves() for name in self.tier_capacity}
        # hit tokens by the tier that served them (the last hit_rates event's; empty without tiers)
        self.tier_hits: dict[str, int] = (
            dict.fromkeys([DEVICE, *self.tier_slots], 0) if self.tier_slots else {}
        )
        # request id -> {tier: [blocks, bytes]} loaded for its admission in progress (its prefix_match follows)
        self._loads: dict[str, dict[str, list[int]]] = {}

    def _snapshot_tiers(self, new) -> None:
        new.tier_capacity = dict(self.tier_capacity)
        new.tier_slots = {name: dict(slots) for name, slots in self.tier_slots.items()}
        new.tier_of = dict(self.tier_of)
        new.tier_moves = {name: moves.copy() for name, moves in self.tier_moves.items()}
        new.tier_hits = dict(self.tier_hits)
        new._loads = {rid: {t: list(v) for t, v in loads.items()} for rid, loads in self._loads.items()}

    # ------------------------------------------------------------------ derived views
    @property
    def lower_tiers(self) -> list[str]:
        """The lower tiers this trace has, top first."""
        return list(self.tier_slots)

    def tier_hashes(self) -> dict[str, dict[int, str]]:
        """Each lower tier's occupied slots: slot -> hash (what the engine's `LowerTiers.slots()` says)."""
        return {name: {slot: s.hash for slot, s in slots.items()} for name, slots in self.tier_slots.items()}

    def tier_children(self) -> dict[str, list[tuple[str, int]]]:
        """Parent hash -> (tier, slot) of the lower-tier blocks chained on it, oldest arrival first."""
        out: dict[str, list[tuple[str, int, float]]] = {}
        for name, slots in self.tier_slots.items():
            for slot, s in slots.items():
                out.setdefault(s.parent_hash, []).append((name, slot, s.arrived))
        return {key: [(t, slot) for t, slot, _ in sorted(v, key=lambda x: x[2])] for key, v in out.items()}

    def take_loads(self, request_id: str) -> dict[str, list[int]] | None:
        """The blocks and bytes loaded for the request's admission (called by its prefix_match)."""
        return self._loads.pop(request_id, None)

    # ------------------------------------------------------------------ helpers
    def _tier(self, name: str) -> dict[int, TierSlot]:
        """A tier's slots (a tier the header did not size, e.g. a what-if's, appears with its first event)."""
        if name not in self.tier_slots:
            self.tier_slots[name] = {}
            self.tier_capacity.setdefault(name, 0)
            self.tier_moves[name] = TierMoves()
        return self.tier_slots[name]

    def _free_slot(self, name: str, slot: int) -> TierSlot | None:
        held = self._tier(name).pop(slot, None)
        if held is not None and self.tier_of.get(held.hash) == (name, slot):
            del self.tier_of[held.hash]
        return held

    # ------------------------------------------------------------------ events
    def _on_block_offloaded(self, ev: dict) -> None:
        name, slot, src_tier = ev["tier"], ev["slot"], ev["src_tier"]
        if src_tier != DEVICE:
            # moved down a tier: its slot above is free again
            self._free_slot(src_tier, ev["src"])
            self._tier(src_tier)
            self.tier_moves[src_tier].demoted += 1
        self._free_slot(name, slot)
        ids = tuple(ev["token_ids"])
        texts = ev.get("texts")
        self._tier(name)[slot] = TierSlot(
            ev["hash"],
            ev["parent_hash"],
            ids,
            tuple(texts) if texts is not None else tuple(str(t) for t in ids),
            ev["logical"],
            ev["t"],
        )
        self.tier_of[ev["hash"]] = (name, slot)
        moves = self.tier_moves[name]
        moves.offloaded += 1
        moves.offloaded_bytes += self.bytes_per_block

    def _on_block_loaded(self, ev: dict) -> None:
        name = ev["tier"]
        self._free_slot(name, ev["slot"])
        moves = self.tier_moves[name]
        moves.loaded += 1
        moves.loaded_bytes += ev["bytes"]
        loads = self._loads.setdefault(ev["request_id"], {}).setdefault(name, [0, 0])
        loads[0] += 1
        loads[1] += ev["bytes"]

    def _on_host_evicted(self, ev: dict) -> None:
        name = ev["tier"]
        self._free_slot(name, ev["slot"])
        moves = self.tier_moves[name]
        if ev["reason"] == "on_device":
            moves.dropped_on_device += 1
        else:
            moves.dropped_capacity += 1

    def _record_tier_hits(self, ev: dict) -> None:
        """From a hit_rates event (the metrics reducer's handler calls it)."""
        tiers = ev.get("tiers")
        if tiers:
            self.tier_hits = {name: counts["hit_tokens"] for name, counts in tiers.items()}
