"""The KV-cache groups reducer (window_layout="paged", header `kv_groups`): each group's block tables and the
hashes its blocks are stored under.

The table group's blocks are the request's block table (`tables`, as with one group); a block event that names
another group goes to that group's tables (`group_tables`) instead. Ref counts, owners and states stay per
physical block in the pool reducer: a block serves one group at a time, `block_group` says which (the group
of its last allocation, share or copy; a free block keeps its last group, unread).
"""

from __future__ import annotations

from kvtui.state.pool import CACHED, FREE


class GroupsReducer:
    """The groups part of `CacheState`: `block_stored`, and where a block event's table lies."""

    def _init_groups(self, header: dict) -> None:
        # [{kind, window, layers}] per group; empty with one group
        self.kv_groups: list[dict] = list(header.get("kv_groups") or [])
        self.table_group: int | None = header.get("table_group")
        # group -> request id -> physical block per logical block (-1: none, or left the window)
        self.group_tables: dict[int, dict[str, list[int]]] = {}
        # physical -> its group (-1: never in one); empty with one group
        self.block_group: list[int] = [-1] * self.num_blocks if self.kv_groups else []

    def _snapshot_groups(self, new) -> None:
        new.group_tables = {
            g: {rid: list(table) for rid, table in tables.items()} for g, tables in self.group_tables.items()
        }
        new.block_group = list(self.block_group)

    def _note_group(self, physical: int, group: int | None) -> None:
        if group is not None and self.block_group:
            self.block_group[physical] = group

    def group_label(self, group: int, short: bool = False) -> str:
        """`g2 full`, `g0 window 8` (short: `g0 w8`): the group's index and kind, as the views name it."""
        spec = self.kv_groups[group]
        if spec.get("kind") == "sliding_window":
            return f"g{group} {'w' if short else 'window '}{spec.get('window')}"
        return f"g{group} full" if spec.get("layers") else f"g{group} index"

    def group_counts(self) -> list[tuple[int, int, int]]:
        """Per group: (group, blocks held by requests, blocks cached and unreferenced)."""
        held = [0] * len(self.kv_groups)
        cached = [0] * len(self.kv_groups)
        for p, group in enumerate(self.block_group):
            if group < 0:
                continue
            kind = self.block_state(p)
            if kind == CACHED:
                cached[group] += 1
            elif kind != FREE:
                held[group] += 1
        return [(g, held[g], cached[g]) for g in range(len(self.kv_groups))]

    def _tables_of(self, group: int | None) -> dict[str, list[int]]:
        """The tables a block event of `group` changes."""
        if group is None or group == self.table_group:
            return self.tables
        return self.group_tables.setdefault(group, {})

    def _on_block_stored(self, ev: dict) -> None:
        self.block_hash[ev["physical"]] = ev["hash"]
