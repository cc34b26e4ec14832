"""The KV-cache groups reducer (window_layout="paged", header `kv_groups`): each group's block tables and the
hashes its blocks are stored under.

The table group's blocks are the request's block table (`tables`, as with one group); a block event that names
another group goes to that group's tables (`group_tables`) instead. Ref counts, owners and states stay per
physical block in the pool reducer: a block serves one group at a time.
"""

from __future__ import annotations


class GroupsReducer:
    """The groups part of `CacheState`: `block_stored`, and where a block event's table lies."""

    def _init_groups(self, header: dict) -> None:
        # [{kind, window, layers}] per group; empty with one group
        self.kv_groups: list[dict] = list(header.get("kv_groups") or [])
        self.table_group: int | None = header.get("table_group")
        # group -> request id -> physical block per logical block (-1: none, or left the window)
        self.group_tables: dict[int, dict[str, list[int]]] = {}

    def _snapshot_groups(self, new) -> None:
        new.group_tables = {
            g: {rid: list(table) for rid, table in tables.items()} for g, tables in self.group_tables.items()
        }

    def _tables_of(self, group: int | None) -> dict[str, list[int]]:
        """The tables a block event of `group` changes."""
        if group is None or group == self.table_group:
            return self.tables
        return self.group_tables.setdefault(group, {})

    def _on_block_stored(self, ev: dict) -> None:
        self.block_hash[ev["physical"]] = ev["hash"]
