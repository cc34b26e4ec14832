"""KV-cache groups as vLLM's hybrid KV-cache manager forms them (torch-free): layers of one attention type
(full, or a sliding window of W) share one block table per request, and every group's blocks come from one
pool whose blocks all have one page size.

vLLM's rule (`_get_kv_cache_groups_uniform_page_size`): bucket the layers by type in order of first appearance;
the group size is the fewest layers of any type (the most, when that is under 1.5 x the fewest); each type is
cut into ceil(n / size) groups, group i taking layers[i::num_groups], the last padded. A model of one type is
one group. A block then holds the K/V of `size` layers, whichever group it serves.

kvtui pages with one more rule: the request's own block table (`Request.block_table`) and the prefix tree hold
the *table group*, which is the first full-attention group; a model with no full-attention layer gets an extra
group with no layers for them (kind "index": it costs blocks but holds no K/V).

`KVGroup` is the one group type: the hit rule (engine/core/hybrid_hit.py), the what-if twin and the proxy build
groups of a kind and a window without layers.
"""

from __future__ import annotations

from dataclasses import dataclass

# vLLM's kv_cache_spec_kind names, as KV events and kvtui's trace header (kv_groups) spell them; INDEX is
# kvtui's table group without layers (`paged_groups`)
FULL, SLIDING, MAMBA, INDEX = "full_attention", "sliding_window", "mamba", "index"


@dataclass(frozen=True)
class KVGroup:
    """One KV-cache group: its kind, its window in tokens (sliding: the current token included), and the model
    layers it holds (none where only the kind matters: the hit rule, the what-if twin)."""

    kind: str = FULL
    window: int | None = None
    layers: tuple[int, ...] = ()

    def label(self) -> str:
        return {SLIDING: f"sliding-window ({self.window})", FULL: "full"}.get(self.kind, self.kind)

    def to_json(self) -> dict:
        return {"kind": self.kind, "window": self.window, "layers": list(self.layers)}


def group_layers(keys: list) -> list[tuple[object, tuple[int, ...]]]:
    """vLLM's grouping of layers of one page size, whatever tells their types apart (`keys[l]`: layer l's
    type): (type, layers) per group, in the order each type first appears."""
    buckets: dict = {}
    for layer, key in enumerate(keys):
        buckets.setdefault(key, []).append(layer)
    sizes = [len(layers) for layers in buckets.values()]
    size = min(sizes)
    if max(sizes) < size * 1.5:
        size = max(sizes)
    groups = []
    for key, layers in buckets.items():
        count = -(-len(layers) // size)
        groups += [(key, tuple(layers[i::count])) for i in range(count)]
    return groups


def kv_cache_groups(windows: tuple[int | None, ...]) -> list[KVGroup]:
    """vLLM's groups of a model whose layer l attends through `windows[l]` (None: full attention)."""
    return [
        KVGroup(FULL if window is None else SLIDING, window, layers)
        for window, layers in group_layers(list(windows))
    ]


def table_group(groups: list[KVGroup]) -> int:
    """The group the request's block table and the prefix tree hold: the first full-attention group, or the
    layerless one `paged_groups` adds."""
    return next(g for g, group in enumerate(groups) if group.kind in (FULL, INDEX))


def paged_groups(windows: tuple[int | None, ...]) -> list[KVGroup]:
    """`kv_cache_groups`, plus a layerless full group at the end when no layer attends fully."""
    groups = kv_cache_groups(windows)
    if all(group.kind != FULL for group in groups):
        groups.append(KVGroup(INDEX))
    return groups


def layers_per_block(groups: list[KVGroup]) -> int:
    """Layers whose K/V one block holds: the largest group (the others are padded to it)."""
    return max(len(group.layers) for group in groups)
