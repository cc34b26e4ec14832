"""The differential oracle: the UI's state, built from the events alone, against the engine's own state.

`Witness` listens to an engine's trace the way the live UI does (each event through JSON, into a `Timeline`)
and `differences(engine, state)` lists every place where the view and the engine disagree: blocks (state, ref
count, owners, hash, tokens), requests (status, block table and each KV-cache group's, computed, cached,
tokens), tree nodes (blocks,
tokens, lock count, hits), ring slots, the hit-rate counters and the lower tiers (each slot's block, hit tokens
and bytes loaded by tier). An empty list means the view is the truth.
"""

from __future__ import annotations

import json

from engine.core.request import Status
from kvtui.state import CACHED, FINISHED, FREE, PREEMPTED, RUNNING, WAITING
from kvtui.state.timeline import Timeline

STATUS = {Status.WAITING: {WAITING, PREEMPTED}, Status.RUNNING: {RUNNING}, Status.FINISHED: {FINISHED}}


class Witness:
    """The live UI's path: every event serialised as the trace writes it and folded into a Timeline."""

    def __init__(self, engine):
        self.timeline = Timeline(json.loads(json.dumps(engine.trace.header)), keyframe_every=64)
        self.pending: list[dict] = []
        engine.trace.listeners.append(lambda event: self.pending.append(json.loads(json.dumps(event))))

    def state(self):
        self.timeline.extend(self.pending)
        self.pending = []
        return self.timeline.state_at(len(self.timeline))


def differences(engine, state) -> list[str]:
    out: list[str] = []
    _blocks(engine, state, out)
    _requests(engine, state, out)
    _tree(engine, state, out)
    _rings(engine, state, out)
    _hit_rates(engine, state, out)
    _tiers(engine, state, out)
    return out


def _blocks(engine, state, out):
    cache = engine.cache
    pool = cache.pool
    owners: dict[int, set] = {}
    for rid, req in engine.requests.items():
        for logical, physical in enumerate(req.block_table):
            owners.setdefault(physical, set()).add((rid, logical))
    # window_layout="paged": the other KV-cache groups' tables own blocks too
    for rid, tables in cache.groups.tables.items():
        for table in tables.values():
            for logical, physical in enumerate(table):
                if physical is not None:
                    owners.setdefault(physical, set()).add((rid, logical))
    free = set(pool.free)
    for p in range(pool.num_blocks):
        kind = FREE if p in free else ("cached" if pool.ref_counts[p] == 0 else "used")
        seen = state.block_state(p)
        seen = {FREE: FREE, CACHED: "cached"}.get(seen, "used")
        if kind != seen:
            out.append(f"block {p}: engine {kind}, view {seen}")
        if pool.ref_counts[p] != state.ref[p]:
            out.append(f"block {p}: ref count engine {pool.ref_counts[p]}, view {state.ref[p]}")
        if owners.get(p, set()) != set(state.owners[p]):
            out.append(
                f"block {p}: owners engine {sorted(owners.get(p, ()))}, view {sorted(state.owners[p])}"
            )
        if kind != FREE and _hash(cache, p) != state.block_hash[p]:
            out.append(f"block {p}: hash engine {_hash(cache, p)}, view {state.block_hash[p]}")


def _hash(cache, physical: int) -> str | None:
    if physical in cache.groups.hash_of:
        return cache.groups.hash_of[physical][1]
    radix = getattr(cache.prefix_cache, "radix", None)
    if radix is None:
        return None
    node = radix._node_of.get(physical)
    if node is not None:
        return node.keys[node.blocks.index(physical)]
    tail = cache.prefix_cache.tails.of.get(physical)
    return f"tail:{tail.parent_key[:12]}" if tail is not None else None


def _requests(engine, state, out):
    for rid, req in engine.requests.items():
        view = state.requests.get(rid)
        if view is None:
            out.append(f"request {rid}: missing from the view")
            continue
        if view.status not in STATUS[req.status]:
            out.append(f"request {rid}: status engine {req.status.name.lower()}, view {view.status}")
        if list(req.block_table) != state.tables.get(rid, []):
            out.append(f"request {rid}: table engine {req.block_table}, view {state.tables.get(rid, [])}")
        if req.num_computed != view.num_computed:
            out.append(f"request {rid}: computed engine {req.num_computed}, view {view.num_computed}")
        if req.num_cached != view.cached_tokens:
            out.append(f"request {rid}: cached engine {req.num_cached}, view {view.cached_tokens}")
        if req.tokens != view.token_ids:
            out.append(f"request {rid}: tokens engine {req.tokens}, view {view.token_ids}")
        for group, table in engine.cache.groups.tables.get(rid, {}).items():
            expected = [-1 if physical is None else physical for physical in table]
            while expected and expected[-1] < 0:
                expected.pop()
            seen = state.group_tables.get(group, {}).get(rid, [])
            if expected != seen:
                out.append(f"request {rid}: group {group} table engine {expected}, view {seen}")


def _tree(engine, state, out):
    radix = getattr(engine.cache.prefix_cache, "radix", None)
    engine_nodes = {} if radix is None else {i: n for i, n in radix.nodes.items() if i != 0}
    view_nodes = {i: n for i, n in state.nodes.items() if i != 0}
    if set(engine_nodes) != set(view_nodes):
        out.append(f"tree nodes: engine {sorted(engine_nodes)}, view {sorted(view_nodes)}")
    for node_id in set(engine_nodes) & set(view_nodes):
        node, view = engine_nodes[node_id], view_nodes[node_id]
        if node.blocks != view.blocks or node.token_ids != view.token_ids:
            out.append(f"node {node_id}: blocks engine {node.blocks}, view {view.blocks}")
        if node.lock_ref != len(view.lockers):
            out.append(f"node {node_id}: lock refs engine {node.lock_ref}, view {len(view.lockers)}")
        if node.hit_count != view.hits:
            out.append(f"node {node_id}: hits engine {node.hit_count}, view {view.hits}")
        if (node.parent.node_id if node.parent else -1) != view.parent_id:
            out.append(f"node {node_id}: parent engine {node.parent.node_id}, view {view.parent_id}")


def _rings(engine, state, out):
    rings = engine.cache.rings
    for rid, ring_state in rings.states.items():
        for group, grp in enumerate(rings.groups):
            window, sinks = grp.window, rings.sinks
            expected = [-1] * (sinks + window)
            head = ring_state.head
            for pos in [*range(min(sinks, head)), *range(max(sinks, head - window), head)]:
                expected[pos if pos < sinks else sinks + pos % window] = pos
            view = state.rings.get((rid, group))
            slots = view.slots if view is not None else [-1] * (sinks + window)
            if slots != expected:
                out.append(f"ring {rid}/{group}: engine slots {expected}, view {slots}")


def _hit_rates(engine, state, out):
    expected = engine.cache.hit_rates.event_fields()
    seen = state.hit_rates
    if seen is None and expected["window"]["n"] == 0:
        # no lookup yet: no hit_rates event either
        return
    if seen is None:
        out.append(f"hit rates: engine {expected}, view none")
        return
    seen = {k: v for k, v in seen.items() if k not in ("seq", "t", "type")}
    if seen != json.loads(json.dumps(expected)):
        out.append(f"hit rates: engine {expected}, view {seen}")


def _tiers(engine, state, out):
    tiers = engine.cache.tiers
    expected = {} if tiers is None else tiers.slots()
    if expected != state.tier_hashes():
        out.append(f"tier slots: engine {expected}, view {state.tier_hashes()}")
    for store in () if tiers is None else tiers.stores:
        for key, block in store.blocks.items():
            view = state.tier_slots.get(store.name, {}).get(block.slot)
            if view is None or view.hash != key:
                continue
            seen = (view.parent_hash, list(view.token_ids), view.logical)
            if seen != (block.parent_key, block.token_ids, block.logical):
                out.append(f"{store.name} slot {block.slot}: engine {block}, view {view}")
    hits = engine.cache.hit_rates.tier_hits
    if hits != state.tier_hits:
        out.append(f"hit tokens by tier: engine {hits}, view {state.tier_hits}")
    loaded = {} if tiers is None else tiers.loaded_bytes
    seen = {name: moves.loaded_bytes for name, moves in state.tier_moves.items()}
    if loaded != seen:
        out.append(f"bytes loaded by tier: engine {loaded}, view {seen}")
