"""Straight replays and the fingerprint of a state: the facts two runs must agree on (live vs replay, seek vs
straight replay, the reducer vs the engine)."""

from __future__ import annotations

from typing import Any

from kvtui.state.cache_state import CacheState
from kvtui.state.metrics import History


def replay(header: dict, events, history: History | None = None) -> CacheState:
    """The state after all `events` (a straight replay, no keyframes)."""
    state = CacheState(header, history)
    state.apply_all(events)
    return state


def state_fingerprint(state: CacheState) -> dict[str, Any]:
    """The facts two runs must agree on (live vs replay, seek vs straight replay), as plain data."""
    return {
        "index": state.index,
        "seq": state.seq,
        "ref": list(state.ref),
        "kind": list(state.kind),
        "owners": [sorted(o) for o in state.owners],
        "hash": list(state.block_hash),
        "tables": {k: list(v) for k, v in sorted(state.tables.items())},
        "free": state.n_free,
        "n_cached": state.n_cached,
        "requests": {
            rid: (
                r.status,
                r.prompt_len,
                list(r.token_ids),
                list(r.texts),
                r.ttft,
                r.tpot,
                r.match and r.match["reason"],
                len(r.marks),
            )
            for rid, r in sorted(state.requests.items())
        },
        "nodes": {
            nid: (
                n.parent_id,
                list(n.blocks),
                list(n.token_ids),
                sorted(n.children),
                n.hits,
                sorted(n.lockers),
            )
            for nid, n in sorted(state.nodes.items())
        },
        "rings": {
            f"{k[0]}/{k[1]}": (list(r.slots), r.head, r.overwrites) for k, r in sorted(state.rings.items())
        },
        "steps": state.history_steps(),
        "hits": state.history_hits(),
        "n_itl": state.n_itl,
        "last_edit": state.last_edit and state.last_edit["seq"],
        "last_invalidate": state.last_invalidate and state.last_invalidate["seq"],
        "tier_slots": state.tier_slots,
        "tier_moves": state.tier_moves,
        "tier_hits": state.tier_hits,
        "loaded": {rid: r.loaded for rid, r in sorted(state.requests.items()) if r.loaded},
    }
