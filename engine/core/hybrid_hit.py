"""vLLM's hybrid prefix-hit rule: KV-cache groups (one per layer type, as vLLM groups layers of equal page size)
share one block pool, and a prefix hit is the longest that every group can serve. Torch-free; block indices
are logical (the prompt's block 0, 1, ...), and "cached" is asked of a group one block at a time.

    full             every block from the start: the longest leading run of cached blocks
    sliding_window   the blocks covering the last window before the hit point: a run of
                     ceil((window - 1) / block) contiguous cached blocks ending at it, found from the right
                     (or, shorter than that, a run from block 0)
    mamba            one state at the hit point, held only at `prefix_match_unit` boundaries: the rightmost
                     cached block that ends on one

The hit starts at the whole blocks before the prompt's last token (vLLM recomputes it for its logits), rounded
down to the match unit; the full group goes first (it bounds the rest), then each other group cuts it, and a
cut sends the candidate round the groups again until none cuts it (vLLM's
`HybridKVCacheCoordinator.find_longest_cache_hit`). `limited_by` names the group that cut the hit last, so an
explainer can say which group limited it.

What a window or Mamba-style group keeps cached is its own matter (vLLM's `prefix_cache_retention_interval`):
`retained_blocks` says which of a request's blocks such a group caches. vLLM 0.32's default (0) keeps only the
blocks a later request can resume at: the run before the prompt's last token, and the run before a shared-prefix
junction (where the full group found more than the others could serve).

The groups are engine/models/kv_groups.py's `KVGroup`s. The engine's paged layout (engine/core/group_blocks.py),
the what-if twin (kvtui/whatif/hybrid_cache.py) and the proxy's explainer (kvtui/state/fleet_hybrid.py) all
settle hits and retention by these functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from engine.models.kv_groups import FULL, MAMBA, SLIDING, KVGroup, group_layers


@dataclass
class HybridHit:
    tokens: int
    # the group index that cut the hit last (None: no group cut below the prompt's bound)
    limited_by: int | None = None
    # what each group could serve on its own, up to the bound (group index -> tokens)
    per_group: dict = field(default_factory=dict)
    bound: int = 0
    # the longest hit one group found before the others cut it (vLLM's shared-prefix junction when longer
    # than `tokens`: the full group's, where there is one)
    longest: int = 0


def contiguous_blocks(window: int, block_size: int) -> int:
    """The run of blocks a sliding-window group needs before a hit point: those holding its last window - 1
    tokens (the token at the hit point is computed again)."""
    return -(-(window - 1) // block_size)


def group_hit(
    group: KVGroup, cached: Callable[[int], bool], max_tokens: int, block_size: int, unit: int
) -> int:
    """What one group serves on its own, at most `max_tokens` (a multiple of the block size): `cached(i)` says
    whether the prompt's block i is cached in this group."""
    blocks = max_tokens // block_size
    if group.kind == FULL:
        n = 0
        while n < blocks and cached(n):
            n += 1
        return _aligned(n * block_size, unit)
    if group.kind == SLIDING:
        need = contiguous_blocks(group.window or 1, block_size)
        run = 0
        for i in range(blocks - 1, -1, -1):
            if cached(i):
                # a run's right edge must end on the match unit
                if run == 0 and (i + 1) * block_size % unit:
                    continue
                run += 1
                if run >= need:
                    return (i + run) * block_size
            else:
                run = 0
        return _aligned(run * block_size, unit)
    for i in range(blocks - 1, -1, -1):
        if (i + 1) * block_size % unit == 0 and cached(i):
            return (i + 1) * block_size
    return 0


def _aligned(tokens: int, unit: int) -> int:
    return tokens - tokens % unit


def hybrid_hit(
    groups: list[KVGroup],
    cached: Callable[[int, int], bool],
    prompt_tokens: int,
    block_size: int,
    prefix_match_unit: int | None = None,
) -> HybridHit:
    """The hit every group can serve for a prompt of `prompt_tokens`: `cached(group index, block index)`.
    Groups of one kind and window are asked together, as vLLM does: a block counts where all of them hold
    it."""
    unit = _unit(block_size, prefix_match_unit)
    bound = _aligned(max(prompt_tokens - 1, 0) // block_size * block_size, unit)
    specs: dict[tuple, list[int]] = {}
    for g, group in enumerate(groups):
        specs.setdefault((group.kind, group.window), []).append(g)
    members = sorted(specs.values(), key=lambda m: groups[m[0]].kind != FULL)

    def served(m: list[int], most: int) -> int:
        return group_hit(groups[m[0]], lambda i: all(cached(g, i) for g in m), most, block_size, unit)

    per_group = {m[0]: served(m, bound) for m in members}
    hit, limited = bound, None
    while True:
        start = hit
        for m in members:
            got = per_group[m[0]] if hit == bound else served(m, hit)
            if got < hit:
                hit, limited = got, m[0]
        if hit == start:
            break
    first = members[0][0]
    longest = per_group[first] if groups[first].kind == FULL else max(per_group.values(), default=0)
    return HybridHit(hit, limited, per_group, bound, max(longest, hit))


def _unit(block_size: int, prefix_match_unit: int | None) -> int:
    if not prefix_match_unit or prefix_match_unit <= block_size:
        return block_size
    if prefix_match_unit % block_size:
        raise ValueError(
            f"prefix match unit {prefix_match_unit} is not a multiple of the block size {block_size}: "
            "give a multiple of it"
        )
    return prefix_match_unit


def retained_blocks(
    group: KVGroup, block_size: int, boundaries: tuple[int, ...], unit: int, interval: int | None = 0
) -> Callable[[int], bool] | None:
    """Which logical blocks a group caches (None: all of them): with `interval` None every block; 0 the run a
    hit needs before each of `boundaries` (token positions: the prompt's last token, a junction); N > 0 also
    the run before every multiple of N tokens."""
    if group.kind == FULL or interval is None:
        return None
    need = contiguous_blocks(group.window or 1, block_size) if group.kind == SLIDING else 1
    ends = [b // unit * unit // block_size for b in boundaries if b > 0]
    per = interval // block_size if interval else 0
    if per and need >= per:
        return None

    def kept(i: int) -> bool:
        if per and i % per >= per - need:
            return True
        return any(end - need <= i < end for end in ends)

    return kept


def groups_from_layers(layer_types: list[str], window: int | None) -> list[KVGroup]:
    """vLLM's groups of a model whose layers all have one page size (engine/models/kv_groups.py's
    `group_layers`), its layers' types named as a config names them."""
    return [
        KVGroup(kind, window if kind == SLIDING else None, layers)
        for kind, layers in group_layers([_kind(t) for t in layer_types])
    ]


def _kind(layer_type: str) -> str:
    t = layer_type.lower()
    if "sliding" in t or "local" in t:
        return SLIDING
    if "mamba" in t or "linear" in t or "ssm" in t or "conv" in t:
        return MAMBA
    return FULL
