"""The tiers below the device in the pool view: each lower tier's slots drawn under the device's blocks.

A tier gets a heading row (slots held, blocks moved in and out) and then its slots, one cell each like the
device's blocks: `□` a block held there (the tier's colour role, `host` or `disk`), `·` a free slot. Rows start
with the tier's letter and the slot of their first cell (`h16`). The pool's cursor runs on from the device's
last block into the tiers' slots: cell `num_blocks + k` is the k-th lower slot, tier after tier.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual.content import Content

from kvtui.state import CacheState
from kvtui.state.tier_costs import measured_tier_costs
from kvtui.widgets.base import fmt_bytes, fmt_seconds, plural, show_text
from kvtui.widgets.palette import Palette, markup

HELD, FREE_SLOT = "□", "·"


@dataclass(frozen=True)
class PoolRow:
    """One row of the pool grid: device blocks, a tier's heading (first = -1), or a tier's slots."""

    tier: str
    first: int


def tier_sizes(state: CacheState) -> list[tuple[str, int]]:
    """(tier, slots) of each lower tier, top first (a tier the header did not size: as far as its slots go)."""
    return [
        (name, max(state.tier_capacity.get(name, 0), max(slots, default=-1) + 1))
        for name, slots in state.tier_slots.items()
    ]


def pool_rows(state: CacheState, cols: int) -> list[PoolRow]:
    rows = [PoolRow("device", first) for first in range(0, state.num_blocks, cols)]
    for name, size in tier_sizes(state):
        rows.append(PoolRow(name, -1))
        rows += [PoolRow(name, first) for first in range(0, size, cols)]
    return rows


def num_cells(state: CacheState) -> int:
    """Cells the cursor can be on: the device's blocks, then every lower slot."""
    return state.num_blocks + sum(size for _, size in tier_sizes(state))


def cell_of(state: CacheState, tier: str, slot: int) -> int:
    """The cursor cell of a tier's slot (of a device block when tier is the device)."""
    cell = state.num_blocks
    if tier == "device":
        return slot
    for name, size in tier_sizes(state):
        if name == tier:
            return cell + slot
        cell += size
    return cell


def slot_at(state: CacheState, cell: int) -> tuple[str, int] | None:
    """(tier, slot) of a cursor cell past the device's blocks; None for a device block."""
    if cell < state.num_blocks:
        return None
    cell -= state.num_blocks
    for name, size in tier_sizes(state):
        if cell < size:
            return name, cell
        cell -= size
    return None


def row_of_cell(state: CacheState, rows: list[PoolRow], cell: int, cols: int) -> int:
    where = slot_at(state, cell)
    tier, slot = where if where is not None else ("device", cell)
    for i, row in enumerate(rows):
        if row.tier == tier and row.first >= 0 and row.first <= slot < row.first + cols:
            return i
    return 0


def tier_heading(state: CacheState, tier: str, size: int) -> list[tuple[str, str]]:
    """A tier's heading as (text, role) pieces: slots held, what moved in and out."""
    moves = state.tier_moves.get(tier)
    held = len(state.tier_slots.get(tier, {}))
    parts = [(f"{tier} ", tier), (f"{held}/{size} slots held", "bold")]
    if moves is not None:
        parts.append(
            (
                f" · loaded back {moves.loaded} ({fmt_bytes(moves.loaded_bytes)})"
                f" · in {moves.offloaded} ({fmt_bytes(moves.offloaded_bytes)})"
                + (f" · moved down {moves.demoted}" if moves.demoted else "")
                + f" · dropped {moves.dropped_capacity} (full)"
                + (f", {moves.dropped_on_device} (on device again)" if moves.dropped_on_device else ""),
                "dim",
            )
        )
    return parts


def tier_row_segments(
    state: CacheState,
    row: PoolRow,
    cols: int,
    margin: int,
    palette: Palette,
    cursor: tuple | None,
    focused: bool,
) -> list[Segment]:
    """The segments of a tier's heading or slot row (`cursor`: the (tier, slot) under the cursor, if any)."""
    dim = palette["dim"]
    size = dict(tier_sizes(state)).get(row.tier, 0)
    if row.first < 0:
        return [Segment(" " * margin)] + [
            Segment(text, palette[role]) for text, role in tier_heading(state, row.tier, size)
        ]
    segments = [Segment(f"{row.tier[0] + str(row.first):>{margin - 1}} ", dim)]
    slots = state.tier_slots.get(row.tier, {})
    held_style, free_style = (
        palette[row.tier] if row.tier in ("host", "disk") else palette["host"],
        palette["free"],
    )
    for slot in range(row.first, min(row.first + cols, size)):
        held = slot in slots
        style = held_style if held else free_style
        if cursor == (row.tier, slot):
            style = style + (palette["cursor"] if focused else Style(underline=True))
        segments.append(Segment(HELD if held else FREE_SLOT, style))
        segments.append(Segment(" ", dim))
    return segments


def tier_legend(state: CacheState) -> list:
    """The pool legend's part for the lower tiers: `□ host 3/8`."""
    parts: list = []
    for name, size in tier_sizes(state):
        role = name if name in ("host", "disk") else "host"
        parts += [(HELD, markup(role)), f" {name} {len(state.tier_slots[name])}/{size}  "]
    return parts


def slot_details(state: CacheState, tier: str, slot: int) -> Content:
    """What a lower tier's slot holds: its block's hash, parent, position, age and tokens."""
    role = tier if tier in ("host", "disk") else "host"
    dim = markup("dim")
    held = state.tier_slots.get(tier, {}).get(slot)
    parts: list = [(f"{tier} slot {tier[0]}{slot}  ", markup("bold"))]
    if held is None:
        parts.append(("free", markup("free")))
        parts.append(("\nA block the device evicts is copied into a free slot.", dim))
        return Content.assemble(*parts)
    parts += [
        ("held", markup(role)),
        f"  block L{held.logical} of its sequence\n",
        f"hash {held.hash}\n",
        (f"parent {held.parent_hash} (the tree hangs it there)\n", dim),
        f"in {tier} for {fmt_seconds(max(0.0, state.t - held.arrived))}\n",
        (f"tokens ({len(held.token_ids)}/{state.block_size}): ", dim),
    ]
    shades = (markup("token-a"), markup("token-b"))
    parts += [(show_text(text), shades[i % 2]) for i, text in enumerate(held.texts)]
    parts.append(
        (
            f"\n{fmt_bytes(state.bytes_per_block)} of K/V; a prefix match that reaches it loads it back into a "
            f"device block ({plural(len(state.tier_slots[tier]), 'block')} in {tier} now)",
            dim,
        )
    )
    parts.append(("\n" + load_against_recompute(state), dim))
    return Content.assemble(*parts)


def load_against_recompute(state: CacheState) -> str:
    """Whether a load pays, as `kvtui bench tiers` measured it on this machine for this model and block size."""
    model = (state.header.get("model") or {}).get("name")
    costs = measured_tier_costs(model, state.block_size)
    if costs is None:
        return "kvtui bench tiers measures a load against computing the block again on this machine"
    load, recompute = costs["load"], costs["recompute"]
    verdict = "a load pays" if load < recompute else "computing again is cheaper"
    return (
        f"on this machine ({costs['device']}, kvtui bench tiers {costs['measured']}): load "
        f"{load * 1e3:.3g} ms a block, compute again {recompute * 1e3:.3g} ms: {verdict}"
    )
