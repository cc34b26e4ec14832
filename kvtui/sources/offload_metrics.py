"""What a server's /metrics says of its KV tiers below the GPU, read where it exports them (a server without
offloading has none of these samples, and its facts have none of these keys).

vLLM: `vllm:external_prefix_cache_queries` / `_hits` (tokens its KV connector, an offloading tier or LMCache,
was asked for and served), the offloading connector's `vllm:kv_offload_load_bytes` / `_store_bytes` /
`_load_time` / `_store_time` (GPU <- tier and GPU -> tier; before them `vllm:kv_offload_total_bytes` and
`_total_time` with transfer_type CPU_to_GPU / GPU_to_CPU, read only where the new names are missing),
`vllm:kv_offload_config_info` (cpu_num_chunks x cpu_blocks_per_chunk: the CPU tier's size in blocks), and the
simple CPU offload's `vllm:simple_kv_offload_load_blocks_total` and `vllm:simple_kv_offload_info`
(capacity_blocks, backend). SGLang HiCache: `sglang:cached_tokens_total` by cache_source (device, host,
storage, total), `sglang:hicache_host_used_tokens` / `_total_tokens`, `sglang:load_back_tokens_total` and
`sglang:hicache_backup_tokens_total` (host -> GPU and GPU -> host, pool kv), `sglang:backuped_tokens_total`
(host -> storage) and `sglang:evicted_tokens_total`. SGLang's tensor-parallel ranks each report the same
count under their own tp_rank label: one is read (the largest), not their sum.
"""

from __future__ import annotations

# base name (after "vllm:" / "sglang:") -> fact key; counters with and without the exposition's _total
_NAMES = {
    "external_prefix_cache_queries": "external_queries",
    "external_prefix_cache_hits": "external_hits",
    "kv_offload_load_bytes": "offload_load_bytes",
    "kv_offload_store_bytes": "offload_store_bytes",
    "kv_offload_load_time": "offload_load_seconds",
    "kv_offload_store_time": "offload_store_seconds",
    "simple_kv_offload_load_blocks": "offload_load_blocks",
    "hicache_host_used_tokens": "host_used_tokens",
    "hicache_host_total_tokens": "host_total_tokens",
    "load_back_tokens": "offload_load_tokens",
    "hicache_backup_tokens": "offload_store_tokens",
    "backuped_tokens": "storage_store_tokens",
    "evicted_tokens": "evicted_tokens",
}
NAMES = {**_NAMES, **{f"{name}_total": key for name, key in _NAMES.items()}}
# the offloading connector's names before the flat ones: (name, transfer_type) -> fact key
_OLD = {
    ("kv_offload_total_bytes_total", "CPU_to_GPU"): "offload_load_bytes",
    ("kv_offload_total_bytes_total", "GPU_to_CPU"): "offload_store_bytes",
    ("kv_offload_total_time_total", "CPU_to_GPU"): "offload_load_seconds",
    ("kv_offload_total_time_total", "GPU_to_CPU"): "offload_store_seconds",
}
_OTHER = {
    "cached_tokens_total",
    "kv_offload_config_info",
    "simple_kv_offload_info",
    "kv_offload_total_bytes_total",
    "kv_offload_total_time_total",
}
OFFLOAD_SAMPLES = frozenset(NAMES) | _OTHER


def add_sample(out: dict, base: str, labels: dict[str, str], value: float) -> None:
    """Fold one sample of OFFLOAD_SAMPLES into a rank's facts (`finish` completes them)."""
    # SGLang's per-pool counters: the KV pool's (swa and mamba pools are other state)
    if labels.get("pool", "kv") != "kv":
        return
    tp = labels.get("tp_rank", "")
    key = NAMES.get(base)
    if key is None:
        key = _OLD.get((base, labels.get("transfer_type", "")))
        if key is not None:
            key = "_old:" + key
    if key is not None:
        by_tp = out.setdefault("_tp", {}).setdefault(key, {})
        by_tp[tp] = by_tp.get(tp, 0.0) + value
    elif base == "cached_tokens_total" and labels.get("cache_source"):
        by_tp = out.setdefault("_tp", {}).setdefault("cached:" + labels["cache_source"], {})
        by_tp[tp] = by_tp.get(tp, 0.0) + value
    elif base == "kv_offload_config_info":
        chunks, per_chunk = labels.get("cpu_num_chunks", ""), labels.get("cpu_blocks_per_chunk", "")
        if chunks.isdigit() and per_chunk.isdigit():
            out["offload_capacity_blocks"] = out.get("offload_capacity_blocks", 0) + int(chunks) * int(
                per_chunk
            )
    elif base == "simple_kv_offload_info":
        if labels.get("capacity_blocks", "").isdigit():
            out["offload_capacity_blocks"] = int(labels["capacity_blocks"])
        if labels.get("backend"):
            out["offload_backend"] = labels["backend"]


def finish(out: dict) -> None:
    """Per fact, the largest tensor-parallel rank's value; the old connector names where the new are missing;
    SGLang's cached tokens by source as one dict."""
    for key, by_tp in out.pop("_tp", {}).items():
        value = max(by_tp.values())
        if key.startswith("cached:"):
            out.setdefault("cached_tokens", {})[key[len("cached:") :]] = value
        elif key.startswith("_old:"):
            out.setdefault(key[len("_old:") :], value)
        else:
            out[key] = value
