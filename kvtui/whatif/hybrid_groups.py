"""A hybrid model's KV-cache groups for the what-if twin, from a model's config.json (`--kv-config`) or from a
proxy log's server settings (`"kv_groups": [{"kind": "sliding_window", "window": 512}, ...]`, in vLLM's group
order), as vLLM would make them (engine/core/hybrid_hit.py's `groups_from_layers`). Torch-free.

A config names its layers' types in `layer_types` (Gemma 2 / 3, Qwen2, Qwen3-Next, gpt-oss), in
`layers_block_type` (Jamba, Granite 4: "mamba" / "attention"), or not at all: then every layer is one kind,
sliding-window when the config sets `sliding_window` (Mistral), else full attention.
"""

from __future__ import annotations

from engine.core.hybrid_hit import groups_from_layers
from engine.models.kv_groups import FULL, MAMBA, SLIDING, KVGroup

KINDS = (FULL, SLIDING, MAMBA)


def groups_from_config(config: dict) -> list[KVGroup]:
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    window = text.get("sliding_window")
    types = text.get("layer_types") or text.get("layers_block_type")
    if not types:
        layers = int(text.get("num_hidden_layers") or 1)
        kind = "sliding_attention" if window and text.get("use_sliding_window", True) else "full_attention"
        types = [kind] * layers
    return groups_from_layers([str(t) for t in types], window)


def groups_from_server(server: dict | None) -> list[KVGroup]:
    """The groups a proxy log recorded ([] when it recorded none)."""
    out = []
    for g in (server or {}).get("kv_groups") or ():
        kind = g.get("kind") if isinstance(g, dict) else None
        if kind not in KINDS:
            raise ValueError(
                f"the log's server settings name a KV-cache group of kind {kind!r}: not one of {KINDS}"
            )
        out.append(KVGroup(kind, g.get("window") if kind == SLIDING else None))
    return out


def is_hybrid(groups: list[KVGroup]) -> bool:
    """Whether the groups differ from one full-attention group (the model the rest of the what-if runs)."""
    return any(g.kind != FULL for g in groups)


# bytes of one K/V element by precision name
ITEM_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1, "int8": 1}


def layer_bytes_per_token(config: dict, kv_dtype: str) -> int | None:
    """One attention layer's K and V bytes a token (None when the config does not say its heads)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    heads = text.get("num_key_value_heads") or text.get("num_attention_heads")
    dim = text.get("head_dim") or (
        text["hidden_size"] // text["num_attention_heads"]
        if text.get("hidden_size") and text.get("num_attention_heads")
        else None
    )
    item = ITEM_BYTES.get(kv_dtype)
    return 2 * heads * dim * item if heads and dim and item else None


def describe(groups: list[KVGroup], unit: int | None, block_size: int, layer_bytes: int | None = None) -> str:
    """The run's note on its groups; with one layer's K/V bytes a token, each group's block (vLLM's page: its
    layers' K/V of `block_size` tokens)."""
    kinds: dict[str, int] = {}
    for g in groups:
        kinds[g.label()] = kinds.get(g.label(), 0) + 1
    parts = ", ".join(f"{n} {label}" for label, n in kinds.items())
    text = (
        f"KV-cache groups: {parts}, sharing one pool (a capacity is the pool's blocks; each group takes its own "
        f"blocks from it); hits by vLLM's hybrid rule, in multiples of {unit or block_size} tokens"
    )
    if layer_bytes and all(g.layers for g in groups):
        shares = sorted({len(g.layers) for g in groups if g.kind != MAMBA})
        text += "; " + ", ".join(
            f"{n} attention layer(s) a group: {layer_bytes * n:,} bytes a token, {layer_bytes * n * block_size:,} "
            "a block"
            for n in shares
        )
    return text
