"""Engine options: pool size, block size, batching budget, prefix cache, eviction, attention sinks, K/V precision."""

from __future__ import annotations

from dataclasses import dataclass

from engine.models.kv_groups import layers_per_block, paged_groups
from engine.models.kv_precision import normalize_kv_dtype
from engine.models.shape import ModelShape

DEFAULT_KV_MEMORY_MB = 256


@dataclass
class EngineConfig:
    # auto | cpu | cuda[:n]
    device: str = "auto"
    # float32 | bfloat16 | float16 (used when the engine loads the model)
    dtype: str = "float32"
    block_size: int = 16
    # pool size; default from kv_memory_mb
    num_blocks: int | None = None
    # pool budget when num_blocks is not given (default 256 MiB)
    kv_memory_mb: float | None = None
    # tokens per step (prefill chunks + decodes)
    max_batched_tokens: int = 512
    # requests running at once
    max_num_seqs: int = 64
    # share cached prefixes between requests (radix tree)
    prefix_cache: bool = True
    # reuse the leading tokens of a cached block past the last whole one (a tail, or a longer block): hits to the
    # token. False serves whole blocks only and keeps no tails, as vLLM and SGLang's paged caches do. None: True
    # with rings, False with paged window layers
    partial_hits: bool | None = None
    # lru | lfu | cost: which cached block goes first when the pool runs out
    eviction: str = "lru"
    # requests in the sliding window of the hit rates
    hit_rate_window: int = 32
    # attention sinks (StreamingLLM): every layer keeps only the last W positions ...
    window: int | None = None
    # ... plus the first S; changes the model's answer (event sink_divergence)
    sink_tokens: int = 0
    # K/V stored at int8 | fp8_e4m3 ('fp8') with a scale per token and KV head, dequantized on read: changes the
    # answer (kvtui precision measures how much). None: the model's dtype, exact
    kv_dtype: str | None = None
    # blocks of host memory below the device pool: evicted cached blocks are copied there and loaded back on a
    # prefix hit (engine/core/tiers.py); 0 drops them, as one tier does
    host_blocks: int = 0
    # blocks of disk below host (what-if runs: the engine's worker keeps no disk tier)
    disk_blocks: int = 0
    # sliding-window layers: "ring" (per-request rings of W slots, kvtui's design) or "paged" (vLLM's hybrid
    # layout: KV-cache groups sharing the pool, window blocks freed as they leave the window,
    # engine/core/group_blocks.py)
    window_layout: str = "ring"
    # window_layout="paged": which blocks a window group keeps cached, as vLLM's prefix_cache_retention_interval:
    # 0 the runs a later hit resumes at (before the prompt's last token and a shared-prefix junction), N > 0
    # those and the run before every N tokens too, None every block
    retention_interval: int | None = 0

    def __post_init__(self):
        if self.block_size < 1:
            raise ValueError(f"block_size must be at least 1 (got {self.block_size})")
        if self.num_blocks is not None and self.num_blocks < 1:
            raise ValueError(f"num_blocks must be at least 1 (got {self.num_blocks})")
        if self.max_batched_tokens < 1 or self.max_num_seqs < 1:
            raise ValueError(
                f"max_batched_tokens and max_num_seqs must be at least 1 (got "
                f"{self.max_batched_tokens}, {self.max_num_seqs})"
            )
        if self.window is not None and self.window < 1 or self.sink_tokens < 0:
            raise ValueError(
                f"window must be >= 1 and sink_tokens >= 0 (got {self.window}, {self.sink_tokens})"
            )
        self.kv_dtype = normalize_kv_dtype(self.kv_dtype)
        if self.host_blocks < 0 or self.disk_blocks < 0:
            raise ValueError(
                f"host_blocks and disk_blocks must be >= 0 (got {self.host_blocks}, {self.disk_blocks})"
            )
        if self.disk_blocks and not self.host_blocks:
            raise ValueError("disk_blocks needs host_blocks too: blocks reach disk through host")
        if (self.host_blocks or self.disk_blocks) and not self.prefix_cache:
            raise ValueError("host_blocks needs the prefix cache: only cached blocks move between tiers")
        if self.window_layout not in ("ring", "paged"):
            raise ValueError(f"window_layout must be 'ring' or 'paged' (got {self.window_layout!r})")
        paged = self.window_layout == "paged"
        if self.partial_hits is None:
            self.partial_hits = not paged
        if paged and (self.partial_hits or self.window is not None or self.host_blocks):
            raise ValueError(
                "window_layout='paged' serves whole blocks from one device pool, as vLLM does: it takes no "
                "partial_hits, window (sinks) or host_blocks"
            )
        if self.retention_interval is not None and (
            self.retention_interval < 0 or self.retention_interval % self.block_size
        ):
            raise ValueError(
                f"retention_interval must be None or a multiple of the block size {self.block_size} "
                f"(got {self.retention_interval})"
            )
        if self.sink_tokens and self.window is None:
            raise ValueError("sink_tokens needs a window too: EngineConfig(sink_tokens=S, window=W)")

    def lower_tiers(self) -> list[tuple[str, int]]:
        """The tiers below the device pool and their blocks, top first (empty: one tier)."""
        return [(name, n) for name, n in (("host", self.host_blocks), ("disk", self.disk_blocks)) if n]

    def pool_blocks(self, shape: ModelShape) -> int:
        if self.num_blocks is not None:
            return self.num_blocks
        budget = (self.kv_memory_mb or DEFAULT_KV_MEMORY_MB) * 2**20
        # the budget buys blocks at the stored precision
        if self.kv_dtype is not None:
            shape = shape.with_kv_dtype(self.kv_dtype)
        if self.window_layout == "paged":
            # one block holds the K/V of the largest group's layers, whichever group it serves
            layers = layers_per_block(paged_groups(shape.windows))
            return max(1, int(budget // (layers * shape.kv_bytes_per_token_per_layer() * self.block_size)))
        # with no full-attention layer the pool only keeps block tables (0 bytes): size it as if one layer did
        per_block = (
            shape.kv_bytes_per_block(self.block_size)
            or shape.kv_bytes_per_token_per_layer() * self.block_size
        )
        return max(1, int(budget // per_block))
