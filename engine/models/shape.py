"""The one shape of a model's KV cache, from a loaded model's config or a raw config.json: torch-free.

KV bytes = 2 (K and V) x layers x kv_heads x head_dim x bytes per element x tokens. A sliding-window layer holds
at most W tokens (a ring), a full layer all of them. MHA has one KV head per query head, GQA fewer, MQA one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from engine.models.kv_precision import normalize_kv_dtype, row_bytes


class ModelLoadError(RuntimeError):
    """A model kvtui cannot load or page; the message says why and what to do."""


@dataclass(frozen=True)
class ModelShape:
    """Everything about a model that decides the size and layout of its KV cache."""

    name: str
    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    dtype: str
    # bytes of one element; 0.5 for int4 in `kvtui info --config` arithmetic
    elem_bytes: float
    # per layer: None = full attention, W = sliding window of W tokens
    windows: tuple[int | None, ...]
    # attention sinks (StreamingLLM): first S positions kept on every ring layer
    sink_tokens: int = 0
    # EngineConfig(window=W) made every layer a window layer (changes answers)
    forced_window: int | None = None
    # the config's model_type (shown by `kvtui info --config`; not part of the trace header)
    model_type: str = field(default="", compare=False)
    # K/V stored quantized (engine/models/kv_precision.py: int8 | fp8_e4m3, a scale per row); None: the dtype
    kv_dtype: str | None = None

    def with_sinks(self, sink_tokens: int, window: int) -> ModelShape:
        """Every layer keeps the first `sink_tokens` and the last `window` positions (a narrower native window
        stays)."""
        windows = tuple(window if w is None else min(w, window) for w in self.windows)
        return replace(self, windows=windows, sink_tokens=sink_tokens, forced_window=window)

    def with_kv_dtype(self, kv_dtype: str | None) -> ModelShape:
        """The same model with its K/V stored at `kv_dtype` (None: the model's dtype)."""
        return replace(self, kv_dtype=normalize_kv_dtype(kv_dtype))

    @property
    def full_layers(self) -> list[int]:
        return [i for i, w in enumerate(self.windows) if w is None]

    @property
    def window_layers(self) -> list[int]:
        return [i for i, w in enumerate(self.windows) if w is not None]

    @property
    def paged_layers(self) -> list[int]:
        """Layers whose K/V live in the paged block pool: the full-attention ones (window layers use rings)."""
        return self.full_layers

    def attention_kind(self, kv_heads: int | None = None) -> str:
        """MHA, GQA n:1 or MQA, for this model's KV heads or for `kv_heads` (what grouping would save)."""
        kv = self.kv_heads if kv_heads is None else kv_heads
        if kv == self.q_heads:
            return "MHA"
        return "MQA" if kv == 1 else f"GQA {self.q_heads // kv}:1"

    def kv_bytes_per_token_per_layer(
        self, kv_heads: int | None = None, elem_bytes: float | None = None
    ) -> float:
        """2 (K and V) x kv_heads x head_dim x element bytes: the seeds' formula for one layer; quantized K/V
        (kv_dtype) 2 x kv_heads x (head_dim + a 4-byte scale), unless `elem_bytes` is given."""
        kv = self.kv_heads if kv_heads is None else kv_heads
        if elem_bytes is not None:
            return 2 * kv * self.head_dim * elem_bytes
        return 2 * kv * row_bytes(self.head_dim, self.elem_bytes, self.kv_dtype)

    def kv_bytes_per_token(self) -> int:
        """Bytes one token costs in the paged pool: 2 x paged layers x kv_heads x head_dim x element bytes."""
        return int(len(self.paged_layers) * self.kv_bytes_per_token_per_layer())

    def ring_bytes_per_request(self) -> int:
        """Bytes of one request's rings, constant however long it runs: sum over window layers of (S + W)
        slots."""
        slots = sum(self.sink_tokens + w for w in self.windows if w is not None)
        return int(slots * self.kv_bytes_per_token_per_layer())

    def kv_bytes_per_block(self, block_size: int) -> int:
        return self.kv_bytes_per_token() * block_size

    def to_json(self) -> dict:
        """The trace header's `model` (engine/trace/schema.py)."""
        data = asdict(self)
        del data["model_type"]
        # an exact cache's header is as it always was
        if self.kv_dtype is None:
            del data["kv_dtype"]
        data["windows"] = list(self.windows)
        return data


def _getter(config: Any):
    if isinstance(config, Mapping):
        return config.get
    return lambda key: getattr(config, key, None)


def layer_windows(config: Any, strict: bool = True) -> tuple[int | None, ...]:
    """Per-layer sliding window from a transformers config object or a raw config.json dict.

    The rules, in order: `layer_types` (full_attention / sliding_attention); `use_sliding_window: false`;
    Gemma 2/3's `sliding_window_pattern` (every pattern-th layer full); Qwen's `max_window_layers` (layers
    below it full); otherwise every layer has the window. A layer type other than full or sliding attention
    (chunked, linear) is refused when `strict` (the engine would compute something else), else counted as full
    (`kvtui info --config`'s arithmetic).
    """
    get = _getter(config)
    n = int(get("num_hidden_layers"))
    window = get("sliding_window")
    layer_types = get("layer_types")
    if layer_types:
        unknown = sorted(set(layer_types[:n]) - {"full_attention", "sliding_attention"})
        if unknown and strict:
            # chunked, linear, ...: our attention would silently compute something else
            raise ModelLoadError(
                f"layer types {unknown} are not supported (only full_attention and sliding_attention)"
            )
        return tuple(window if kind == "sliding_attention" else None for kind in layer_types[:n])
    if not window or get("use_sliding_window") is False:
        return (None,) * n
    pattern = get("sliding_window_pattern") or get("_sliding_window_pattern")
    if pattern:
        return tuple(None if (i + 1) % pattern == 0 else window for i in range(n))
    first = get("max_window_layers")
    if first is not None and str(get("model_type") or "").startswith("qwen"):
        return tuple(window if i >= first else None for i in range(n))
    return (window,) * n
