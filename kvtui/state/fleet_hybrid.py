"""The miss explainer for an attached hybrid model (vLLM's KV-cache groups: a full group beside sliding-window or
Mamba-style groups): the hit is vLLM's hybrid rule (engine/core/hybrid_hit.py) over the blocks each group holds,
and the group that limited it is named.

The groups are the model's (a config.json, in vLLM's order) or those the stored blocks named (vLLM 0.32 sends
each block's group, kind and window; FleetState keeps them in `group_specs`). A prompt is walked by its token
ids in the full group (the hashes of its cached blocks); a window or Mamba-style group is asked for those
hashes, which it may hold without token ids (vLLM's sparse retention, kvtui/sources/wire.py). Blocks vLLM has
cached but not yet published (prompts in flight) are given as `flying`: (prompt ids, junction) pairs whose
whole shared blocks every group holds as vLLM keeps them.
"""

from __future__ import annotations

from engine.core.hybrid_hit import HybridHit, hybrid_hit, retained_blocks
from engine.models.kv_groups import FULL, MAMBA, SLIDING, KVGroup
from kvtui.state.fleet_explain import _identity_ok, explain_prompt, explain_worker

# vLLM's kv_cache_spec_kind -> our group kinds
SPEC_KINDS = {"full_attention": FULL, "sliding_window": SLIDING, "mamba": MAMBA}


def groups_of(state) -> list[KVGroup]:
    """The groups the stored blocks named, in order, when they are hybrid (every group seen and not all full
    attention); [] otherwise."""
    specs = getattr(state, "group_specs", {})
    n = max(specs, default=-1) + 1
    if len(specs) != n or any(specs[g][0] not in SPEC_KINDS for g in range(n)):
        return []
    groups = [
        KVGroup(SPEC_KINDS[specs[g][0]], specs[g][1] if specs[g][0] == "sliding_window" else None)
        for g in range(n)
    ]
    return groups if any(g.kind != FULL for g in groups) else []


def explain_any(
    state, ids: list[int], groups: list[KVGroup] | None = None, unit=None, **options
) -> list[dict]:
    """fleet_explain.py's explanation per worker, by the hybrid rule where the groups are hybrid."""
    groups = groups or groups_of(state)
    if not groups:
        return explain_prompt(state, ids, **options)
    return [explain_hybrid(state, w, list(ids), groups, unit, **options)[0] for w in state.workers.values()]


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


def explain_hybrid(
    state,
    worker,
    ids: list[int],
    groups: list[KVGroup],
    unit=None,
    flying=(),
    salt=None,
    lora=None,
    group=None,
) -> tuple[dict, HybridHit | None]:
    """One worker's explanation by the hybrid rule, and the rule's answer (None without a block size)."""
    size, name = worker.block_size, worker.worker
    full = next((g for g, grp in enumerate(groups) if grp.kind == FULL), 0)
    out = explain_worker(state, worker, ids, lora=lora, salt=salt, group=full)
    if not size:
        return out, None
    hashes = matched_hashes(state, name, ids, full, size, lora, salt)
    shared = [(_common_blocks(ids, other, size), len(other), j) for other, j in flying]
    kept = [
        [(n, retained_blocks(grp, size, (p - 1, j), unit or size)) for n, p, j in shared] for grp in groups
    ]

    def published(g: int, i: int) -> bool:
        if g == full:
            return i < len(hashes)
        node = state.nodes.get((g, hashes[i])) if i < len(hashes) else None
        return node is not None and name in node.holders

    def cached(g: int, i: int) -> bool:
        return published(g, i) or any(i < n and (k is None or k(i)) for n, k in kept[g])

    mine = hybrid_hit(groups, published, len(ids), size, unit)
    found = hybrid_hit(groups, cached, len(ids), size, unit) if flying else mine
    out.update(
        matched_tokens=found.tokens,
        matched_blocks=found.tokens // size,
        counts_in_flight=True,
        hybrid={"limited_by": found.limited_by, "per_group": found.per_group},
    )
    if found.tokens > mine.tokens:
        out["in_flight_tokens"] = found.tokens
    if found.limited_by is not None and groups[found.limited_by].kind != FULL:
        grp = groups[found.limited_by]
        out["reason"] = f"group_{grp.kind}"
        held = found.per_group.get(full, found.bound) if groups[full].kind == FULL else found.bound
        kept_text = _runs(lambda i: cached(found.limited_by, i), held // size, size)
        out["message"] = (
            f"{name}: the full group holds {held:,} tokens; group {found.limited_by} ({grp.label()}) keeps "
            f"{kept_text}; the hit is {found.tokens:,}"
            + (
                f": a hit needs the group's blocks for the last {grp.window:,} tokens before its point"
                if grp.kind == SLIDING
                else ": the group holds a state only at a match-unit boundary"
            )
        )
    return out, found
