"""KV-cache bytes for any model from its config alone (no weights, no torch): `kvtui info --config`.

KV bytes = 2 (K and V) x layers x kv_heads x head_dim x bytes per element x tokens. A sliding-window layer holds
at most W tokens (a ring of W slots), a full layer all of them. Paged allocation rounds each sequence up to whole
blocks (35 tokens in blocks of 16 take 3 blocks: 13 slots reserved and unused). The same model with MHA (one KV
head per query head), its own grouping, and MQA (one KV head) side by side shows what grouping saves.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from engine.models.kv_precision import SCALE_BYTES
from engine.models.shape import ModelShape, layer_windows

ELEMENT_BYTES = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float8": 1,
    "fp8": 1,
    "int8": 1,
    "int4": 0.5,
}
# transformers' attribute_map names, as they appear in config.json files
_ALIASES = {
    "num_hidden_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "num_attention_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "hidden_size": ("hidden_size", "n_embd", "d_model", "dim"),
}


class ConfigError(ValueError):
    """A config kvtui cannot read the KV shape from; the message says what is missing."""


def _field(config: dict, key: str):
    for name in _ALIASES.get(key, (key,)):
        if config.get(name) is not None:
            return config[name]
    return None


_JSON_KINDS = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}
# fields the arithmetic reads: None (absent) or a whole number of at least this
_COUNTS = {
    "num_hidden_layers": 1,
    "n_layer": 1,
    "num_layers": 1,
    "n_layers": 1,
    "num_attention_heads": 1,
    "n_head": 1,
    "num_heads": 1,
    "n_heads": 1,
    "num_key_value_heads": 1,
    "num_kv_heads": 1,
    "head_dim": 1,
    "hidden_size": 1,
    "n_embd": 1,
    "d_model": 1,
    "dim": 1,
    "sliding_window": 0,
    "sliding_window_pattern": 1,
    "max_window_layers": 0,
}


def _check_fields(config: dict, name: str) -> None:
    """A field of the wrong kind or sign ("num_hidden_layers": -4 or "abc") is named, not computed with."""
    for key, least in _COUNTS.items():
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(
                f"{name or 'config'}: {key} is {value!r}, not a whole number of at least {least}: fix the config"
            )
    types = config.get("layer_types")
    if types is not None and not (isinstance(types, list) and all(isinstance(t, str) for t in types)):
        raise ConfigError(
            f"{name or 'config'}: layer_types is {types!r}, not a list of names: fix the config"
        )


def shape_from_config(config: dict, name: str = "") -> ModelShape:
    """Read the KV shape from a config.json dict (a multimodal config's text_config when it has one)."""
    if not isinstance(config, dict):
        kind = _JSON_KINDS.get(type(config), type(config).__name__)
        raise ConfigError(
            f"{name or 'config'}: a JSON {kind}, not an object of fields: give a model's config.json"
        )
    outer = config
    if isinstance(config.get("text_config"), dict):
        config = {
            **config["text_config"],
            "model_type": config["text_config"].get("model_type", config.get("model_type", "")),
        }
    _check_fields(config, name)
    layers, q_heads = _field(config, "num_hidden_layers"), _field(config, "num_attention_heads")
    if not layers or not q_heads:
        raise ConfigError(
            f"{name or 'config'}: no num_hidden_layers / num_attention_heads: is it a transformer "
            "language model's config.json?"
        )
    kv_heads = (
        config.get("num_key_value_heads")
        or config.get("num_kv_heads")
        or (1 if config.get("multi_query") else q_heads)
    )
    head_dim = config.get("head_dim")
    if not head_dim:
        hidden = _field(config, "hidden_size")
        if not hidden:
            raise ConfigError(f"{name or 'config'}: neither head_dim nor hidden_size is given")
        head_dim = hidden // q_heads
        if head_dim < 1:
            raise ConfigError(
                f"{name or 'config'}: hidden_size {hidden} is smaller than {q_heads} attention heads: fix the "
                "config or give head_dim"
            )
    if config.get("kv_lora_rank"):
        raise ConfigError(
            f"{name or 'config'}: multi-head latent attention (kv_lora_rank) caches a compressed "
            "latent, not K/V per head: this formula does not apply"
        )
    dtype = outer.get("torch_dtype") or outer.get("dtype") or config.get("torch_dtype") or config.get("dtype")
    windows = layer_windows({**config, "num_hidden_layers": int(layers)}, strict=False)
    return ModelShape(
        name=name,
        layers=int(layers),
        q_heads=int(q_heads),
        kv_heads=int(kv_heads),
        head_dim=int(head_dim),
        dtype=dtype or "",
        elem_bytes=ELEMENT_BYTES.get(str(dtype), 0),
        windows=windows,
        model_type=config.get("model_type", "") or "",
    )


def load_config(source: str) -> tuple[dict, str]:
    """A config.json file, a model directory holding one, or a hub id (config.json only, never weights)."""
    path = Path(source).expanduser()
    if path.is_dir():
        path = path / "config.json"
        if not path.exists():
            raise ConfigError(f"{source}: no config.json in this directory")
    if path.exists():
        try:
            return json.loads(path.read_text()), str(path)
        # a binary file fails to decode: UnicodeDecodeError, a ValueError like JSONDecodeError
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not a readable JSON config ({exc})") from None
    if source.startswith((".", "/", "~")) or source.endswith(".json") or source.count("/") != 1:
        raise ConfigError(
            f"{source}: no such file or directory (give a config.json, a model directory or a "
            "hub id like meta-llama/Llama-3.1-8B)"
        )
    try:
        import socket

        from huggingface_hub import hf_hub_download, try_to_load_from_cache

        cached = try_to_load_from_cache(source, "config.json")
        if isinstance(cached, str):
            return json.loads(Path(cached).read_text()), source
        # fail fast instead of minutes of retries offline
        socket.getaddrinfo("huggingface.co", 443)
        return json.loads(Path(hf_hub_download(source, "config.json")).read_text()), source
    # offline, gated, missing: one line
    except Exception as exc:
        if isinstance(exc, ModuleNotFoundError):
            why = 'huggingface_hub is not installed: pip install "kvtui[engine]"'
        elif isinstance(exc, OSError):
            why = "the hub is not reachable from here"
        else:
            why = type(exc).__name__
        raise ConfigError(
            f"{source}: could not fetch its config.json from the hub ({why}); pass a local "
            "config.json or model directory instead"
        ) from None


def element_bytes(dtype: str) -> float:
    key = str(dtype).removeprefix("torch.").lower()
    if key not in ELEMENT_BYTES:
        raise ConfigError(f"unknown dtype {dtype!r}; choose one of {', '.join(ELEMENT_BYTES)}")
    return ELEMENT_BYTES[key]


def bytes_per_token_at(shape: ModelShape, storage: str | None) -> int:
    """The paged pool's bytes per token with K/V stored at `storage`: None the config's own dtype; a dtype
    (bfloat16, fp32, ...); or a quantized precision (int8, fp8: a value a byte plus a scale per row)."""
    if storage is None:
        return shape.kv_bytes_per_token()
    key = str(storage).lower()
    if key in ("fp8", "fp8_e4m3", "int8", "e4m3", "float8_e4m3fn"):
        return shape.with_kv_dtype(key).kv_bytes_per_token()
    return replace(shape, elem_bytes=element_bytes(key), kv_dtype=None).kv_bytes_per_token()


def kv_bytes(
    shape: ModelShape,
    tokens: list[int],
    elem: float | None,
    kv_heads: int | None = None,
    block_size: int = 0,
    windows: bool = True,
) -> float:
    """Bytes of the K/V of sequences of `tokens` lengths; block_size > 0 rounds full layers up to whole blocks;
    elem None: the shape's own bytes per element (or per quantized row, shape.kv_dtype)."""
    per_token_layer = shape.kv_bytes_per_token_per_layer(kv_heads, elem)
    total = 0.0
    for t in tokens:
        paged = -(-t // block_size) * block_size if block_size else t
        for w in shape.windows:
            total += per_token_layer * (min(t, w) if windows and w is not None else paged)
    return total


def human(n: float) -> str:
    for unit, size in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.2f} {unit}"
    return f"{n:.0f} B"


def format_budget(
    shape: ModelShape, tokens: list[int], dtype: str, block_size: int, kv_dtype: str | None = None
) -> str:
    """kv_dtype (int8 | fp8_e4m3): the table's bytes at that stored precision, a scale per row included."""
    elem = element_bytes(dtype)
    # the table's rows: `dtype`'s elements, or quantized rows of head_dim bytes and a scale
    stored = replace(shape, elem_bytes=elem).with_kv_dtype(kv_dtype)
    row_elem = elem if kv_dtype is None else None
    total_tokens = sum(tokens)
    window_sizes = sorted({w for w in shape.windows if w is not None})
    n_window = sum(w is not None for w in shape.windows)
    lines = [
        f"config         {shape.name}" + (f" ({shape.model_type})" if shape.model_type else ""),
        f"shape          {shape.layers} layers, {shape.q_heads} query heads, {shape.kv_heads} KV heads "
        f"({shape.attention_kind()}), head_dim {shape.head_dim}",
        f"dtype          {dtype} ({elem:g} bytes per element)",
        *_stored_lines(stored, dtype),
        f"tokens         {total_tokens:,}"
        + (f" in {len(tokens)} sequences ({', '.join(map(str, tokens))})" if len(tokens) > 1 else ""),
        f"attention      {shape.layers - n_window} full layers"
        + (
            f", {n_window} sliding-window layers (W = {', '.join(map(str, window_sizes))})"
            if n_window
            else ""
        ),
        "formula        2 (K and V) x layers x kv_heads x "
        + ("head_dim x bytes" if kv_dtype is None else "(head_dim + 4)")
        + " x tokens"
        + ("; a window layer holds min(tokens, W)" if n_window else ""),
        "",
        f"{'':15}{'KV heads':>9}  {'per token':>12}  {'KV cache':>12}"
        + (f"  {'every layer full':>16}" if n_window else "")
        + (f"  {f'blocks of {block_size}':>14}" if block_size else ""),
    ]
    variants = [("MHA", shape.q_heads), (shape.attention_kind(), shape.kv_heads), ("MQA", 1)]
    seen = set()
    for label, kv in variants:
        if kv in seen:
            continue
        seen.add(kv)
        mark = "  <- this model" if kv == shape.kv_heads else ""
        per_token = stored.kv_bytes_per_token_per_layer(kv, row_elem) * shape.layers
        total = kv_bytes(stored, tokens, row_elem, kv)
        row = f"{label:15}{kv:>9}  {human(per_token):>12}  {human(total):>12}"
        if n_window:
            row += f"  {human(kv_bytes(stored, tokens, row_elem, kv, windows=False)):>16}"
        if block_size:
            row += f"  {human(kv_bytes(stored, tokens, row_elem, kv, block_size)):>14}"
        lines.append(row + mark)
    if block_size:
        blocks = sum(-(-t // block_size) for t in tokens)
        waste = blocks * block_size - total_tokens
        lines += [
            "",
            f"paging         {blocks:,} blocks of {block_size} tokens per full layer; {waste} slots "
            "reserved but unused (each sequence's last block)"
            + ("; window layers keep rings of W slots, not blocks" if n_window else ""),
        ]
    return "\n".join(lines)


def _stored_lines(stored: ModelShape, dtype: str) -> list[str]:
    """What a quantized row holds and how many more tokens the same bytes keep (none for the model's dtype)."""
    if stored.kv_dtype is None:
        return []
    exact = stored.with_kv_dtype(None).kv_bytes_per_token_per_layer()
    quantized = stored.kv_bytes_per_token_per_layer()
    return [
        f"K/V stored     {stored.kv_dtype}: {stored.head_dim} values of 1 B + a 4 B float32 scale per token and "
        f"KV head = {stored.head_dim + SCALE_BYTES} B a row ({dtype}: {stored.head_dim * stored.elem_bytes:g} B); "
        f"{exact / quantized:.2f}x the tokens in the same bytes"
    ]
