"""The proxy's prediction and explanation for a hybrid model served by vLLM: the hybrid hit rule
(engine/core/hybrid_hit.py) over the KV-cache groups kvtui's attached view holds, and over the prompts forwarded
and not yet published (in_flight.py), naming the group that limited the hit.

The groups come from the model's config (`kvtui proxy --kv-config`, in vLLM's order) or, without one, from the
events (vLLM 0.32 names each stored block's group, its kind and its window); while they are not hybrid the
explanation is fleet_explain.py's, as without this module. A prompt is walked by its token ids in the full group (the
hashes of its cached blocks); a window or Mamba-style group is then asked for those hashes. Such a group keeps
only some blocks cached (vLLM's sparse retention): a forwarded prompt adds, in them, the run before its last
token and before its junction (what the full group found beyond its hit, which this module remembers from its
own prediction of it).
"""

from __future__ import annotations

import threading

from engine.core.hybrid_hit import FULL, MAMBA, SLIDING, KVGroup, hybrid_hit, retained_blocks
from engine.trace.attach_structs import KvBlockStored
from kvtui.state.fleet_explain import _identity_ok, explain_prompt, explain_worker

# vLLM's kv_cache_spec_kind -> our group kinds
SPEC_KINDS = {"full_attention": FULL, "sliding_window": SLIDING, "mamba": MAMBA}


def matched_hashes(state, name: str, ids: list[int], group: int, size: int, lora=None, salt=None) -> list:
    """The hashes of the prompt's leading blocks that worker `name` holds in `group`, walked by token ids."""
    parent, out = None, []
    for pos in range(0, len(ids) - size + 1, size):
        want = ids[pos : pos + size]
        found = None
        for h in state.children.get((group, parent), ()):
            node = state.nodes[(group, h)]
            if node.token_ids == want and name in node.holders:
                if _identity_ok(node, lora, salt, parent is not None) is None:
                    found = node
                    break
        if found is None:
            break
        out.append(found.hash)
        parent = found.hash
    return out


def _common_blocks(a: list[int], b: list[int], size: int) -> int:
    n, i = min(len(a), len(b)), 0
    while i < n and a[i] == b[i]:
        i += 1
    return min(i, len(b) // size * size) // size


def _runs(cached, blocks: int, size: int) -> str:
    """`tokens 480-1,023, 1,504-1,535`: the token ranges of a group's cached blocks below `blocks`."""
    runs, start = [], None
    for i in range(blocks + 1):
        if i < blocks and cached(i):
            start = i if start is None else start
        elif start is not None:
            runs.append(f"{start * size:,}-{i * size - 1:,}")
            start = None
    return "tokens " + ", ".join(runs) if runs else "no block of them"


class HybridFleet:
    """A FleetState folded by the attach thread and read by the proxy's loop, under one lock, explained by the
    hybrid rule. `in_flight` (the proxy's InFlight) is set by whoever builds the proxy."""

    def __init__(self, fleet, groups: list[KVGroup] | None = None, prefix_match_unit: int | None = None):
        self.fleet = fleet
        self.groups = list(groups or [])
        # group index -> KVGroup, from the events when no config gave the groups
        self.learned: dict[int, KVGroup] = {}
        self.unit = prefix_match_unit
        self.lock = threading.Lock()
        self.in_flight = None
        # (salt, prompt ids) -> the junction this module predicted for it
        self.junctions: dict[tuple, int] = {}

    def fold(self, events) -> None:
        with self.lock:
            self.fleet.apply_all(events)
            if not self.groups:
                self.learn(events)

    def learn(self, events) -> None:
        """The groups' kinds and windows from stored blocks (the first store of each group)."""
        for e in events:
            if type(e) is KvBlockStored and e.spec_kind in SPEC_KINDS and e.group not in self.learned:
                kind = SPEC_KINDS[e.spec_kind]
                self.learned[e.group] = KVGroup(kind, e.sliding_window if kind == SLIDING else None)

    def _groups(self) -> list[KVGroup]:
        if self.groups:
            return self.groups
        n = max(self.learned, default=-1) + 1
        # every group seen, in order, and none of them a plain full-attention model's only group
        if len(self.learned) != n or all(g.kind == FULL for g in self.learned.values()):
            return []
        return [self.learned[g] for g in range(n)]

    def explain(self, ids, options) -> list[dict]:
        with self.lock:
            if not self._groups():
                return explain_prompt(self.fleet, list(ids), **options)
            return [self.explain_worker(w, list(ids), **options) for w in self.fleet.workers.values()]

    def _in_flight(self, salt) -> list[tuple[list[int], int]]:
        prompts = getattr(self.in_flight, "prompts", {}) or {}
        return [
            (other, self.junctions.get((s, tuple(other)), 0)) for other, s in prompts.values() if s == salt
        ]

    def explain_worker(self, worker, ids: list[int], salt=None, lora=None, group=None) -> dict:
        state, size, name = self.fleet, worker.block_size, worker.worker
        groups = self._groups()
        full = next((g for g, grp in enumerate(groups) if grp.kind == FULL), 0)
        out = explain_worker(state, worker, ids, lora=lora, salt=salt, group=full)
        if not size:
            return out
        unit = self.unit or size
        hashes = matched_hashes(state, name, ids, full, size, lora, salt)
        flying = [(_common_blocks(ids, o, size), len(o), j) for o, j in self._in_flight(salt)]
        kept = [[(n, retained_blocks(grp, size, (p - 1, j), unit)) for n, p, j in flying] for grp in groups]

        def published(g: int, i: int) -> bool:
            if g == full:
                return i < len(hashes)
            node = state.nodes.get((g, hashes[i])) if i < len(hashes) else None
            return node is not None and name in node.holders

        def cached(g: int, i: int) -> bool:
            return published(g, i) or any(i < n and (k is None or k(i)) for n, k in kept[g])

        mine = hybrid_hit(groups, published, len(ids), size, self.unit)
        found = hybrid_hit(groups, cached, len(ids), size, self.unit)
        if found.longest > found.tokens:
            self.junctions[(salt, tuple(ids))] = found.longest
        out.update(
            matched_tokens=found.tokens,
            matched_blocks=found.tokens // size,
            counts_in_flight=True,
            hybrid={"limited_by": found.limited_by, "per_group": found.per_group},
        )
        if found.tokens > mine.tokens:
            out["in_flight_tokens"] = found.tokens
        if found.limited_by is not None:
            grp = groups[found.limited_by]
            out["reason"] = f"group_{grp.kind}" if grp.kind != FULL else out["reason"]
            out["message"] = self._message(groups, out, found, cached, size)
        return out

    def _message(self, groups: list[KVGroup], out: dict, found, cached, size: int) -> str:
        g = found.limited_by
        grp = groups[g]
        full = next((x for x, grp_ in enumerate(groups) if grp_.kind == FULL), None)
        held = found.per_group.get(full, found.bound) if full is not None else found.bound
        if grp.kind == FULL:
            return out["message"]
        blocks = held // size
        kept = _runs(lambda i: cached(g, i), blocks, size)
        what = f"group {g} ({grp.label()}) keeps {kept}"
        return (
            f"{out['worker']}: the full group holds {held:,} tokens; {what}; the hit is {found.tokens:,}: "
            f"a hit needs the group's blocks for the last {grp.window or size:,} tokens before its point"
            if grp.window
            else f"{out['worker']}: the full group holds {held:,} tokens; {what}; the hit is {found.tokens:,}"
        )
