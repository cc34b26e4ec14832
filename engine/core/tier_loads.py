"""Admission past the device: a prefix match that runs on into host (or disk) blocks loads them back.

The KV-cache manager (engine/core/kv_cache.py) calls these between its match and its shares: first how many of
the lower-tier blocks the device can take (`fit_loads`), then, once the device part is shared and locked, the
loads themselves (`load_lower`): a device block for each (evicting, and so demoting, others if it must), the
copy for the worker, and the blocks into the prefix tree under the request's lock, as if it had computed them.
"""

from __future__ import annotations

from engine.core.miss_explainer import PrefixMatch
from engine.core.request import Request


def fit_loads(manager, match: PrefixMatch) -> None:
    """Keep the lower-tier blocks of a match that device blocks can be found for, one block left over for the
    first chunk (as `can_admit` asked); the rest are computed again."""
    # matched device blocks nobody holds are evictable now, not once the request shares them
    held = sum(1 for b in match.blocks if manager.pool.ref_counts[b] == 0)
    if manager.can_allocate(len(match.lower) + 1 + held):
        return
    room = max(0, manager.num_available() - held - 1)
    if room < len(match.lower):
        match.detail = {**match.detail, "not_loaded": len(match.lower) - room}
        del match.lower[room:]


def load_lower(manager, req: Request, match: PrefixMatch, tokens: list[int], hashes) -> None:
    """Bring the match's lower-tier blocks into device blocks of the request and into the tree (locked)."""
    lower, match.lower = match.lower, []
    manager.tiers.claim(lower)
    for block in lower:
        logical = len(req.block_table)
        physical = manager.allocate_block(req.request_id, logical)
        manager.tiers.load(block, physical, req.request_id)
        req.block_table.append(physical)
        match.blocks.append(physical)
        match.keys.append(block.key)
        match.tiers.append(block.tier)
    n = len(req.block_table)
    req.lock_node = manager.prefix_cache.insert(
        tokens[: n * manager.block_size],
        req.block_table,
        req.cache_salt,
        req.request_id,
        locked=req.lock_node,
        hashes=hashes,
    )
