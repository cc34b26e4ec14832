"""A server's Prometheus `/metrics` page, read for what a KV-event stream cannot tell: KV usage, token hit
rate, TTFT, preemptions, queue lengths and the pool size.

vLLM: `vllm:kv_cache_usage_perc` (0..1), `vllm:prefix_cache_queries_total` / `vllm:prefix_cache_hits_total`
(token counters), `vllm:num_preemptions_total`, `vllm:time_to_first_token_seconds` (histogram),
`vllm:num_requests_running` / `vllm:num_requests_waiting`, `vllm:cache_config_info` (labels carry
num_gpu_blocks, block_size and cache_dtype, the K/V precision). SGLang: `sglang:token_usage`, `sglang:cache_hit_rate`,
`sglang:time_to_first_token_seconds`. A data-parallel vLLM labels each sample with `engine="<rank>"`: such
samples are kept per rank. Counters and histograms are cumulative, so rates come from two readings.
"""

from __future__ import annotations

import re
import urllib.request

from kvtui.sources.offload_metrics import OFFLOAD_SAMPLES, add_sample, finish

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_text(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample line; comments and lines that do not parse are skipped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        out.append((name, dict(_LABEL.findall(labels or "")), number))
    return out


def _rank_of(labels: dict[str, str]) -> str:
    engine = labels.get("engine") or labels.get("dp_rank") or ""
    return engine if engine.isdigit() else ""


def summarize(text: str) -> dict[str, dict]:
    """Per rank ("" when the samples carry no rank label): the facts the fleet view shows, as plain numbers.

    Keys (each present only if the page has it): kv_usage (0..1), prefix_queries, prefix_hits (token counters),
    hit_rate (0..1, SGLang's own gauge), preemptions, running, waiting, num_gpu_blocks, block_size,
    ttft_buckets ([[upper bound, cumulative count], ...], +Inf last as null), ttft_count, ttft_sum, started
    (the process start time, `process_start_time_seconds`), and the offloading tiers' facts where the page
    has them (kvtui/sources/offload_metrics.py). Samples the views do not read are skipped, so a rank exists
    only where it has facts.
    """
    ranks: dict[str, dict] = {}
    started = None
    for name, labels, value in parse_text(text):
        base = name.split(":", 1)[-1]
        if name == "process_start_time_seconds":
            started = value
            continue
        offload = base in OFFLOAD_SAMPLES
        if (
            not name.startswith(("vllm:", "sglang:"))
            or base not in _KNOWN
            and not base.startswith(_TTFT)
            and not offload
        ):
            # a sample the views do not read (vllm:admission_rejections_total has no engine label: it must
            # not make a rank "" of its own)
            continue
        out = ranks.setdefault(_rank_of(labels), {})
        if offload:
            add_sample(out, base, labels, value)
            continue
        if base == "kv_cache_usage_perc" or base == "gpu_cache_usage_perc" or base == "token_usage":
            out["kv_usage"] = value
        elif base in ("prefix_cache_queries_total", "prefix_cache_queries"):
            out["prefix_queries"] = out.get("prefix_queries", 0.0) + value
        elif base in ("prefix_cache_hits_total", "prefix_cache_hits"):
            out["prefix_hits"] = out.get("prefix_hits", 0.0) + value
        elif base == "cache_hit_rate":
            out["hit_rate"] = value
        elif base in ("num_preemptions_total", "num_preemptions"):
            out["preemptions"] = out.get("preemptions", 0.0) + value
        elif base == "num_requests_running":
            out["running"] = out.get("running", 0.0) + value
        elif base in ("num_requests_waiting", "num_queue_reqs"):
            out["waiting"] = out.get("waiting", 0.0) + value
        elif base == "cache_config_info":
            for key in ("num_gpu_blocks", "block_size"):
                if labels.get(key, "").isdigit():
                    out[key] = int(labels[key])
            # how the server stores K/V: auto (the model's dtype), fp8, fp8_e4m3, int8_per_token_head, ...
            if labels.get("cache_dtype"):
                out["cache_dtype"] = labels["cache_dtype"]
        elif base == "time_to_first_token_seconds_bucket" and "le" in labels:
            le = labels["le"]
            bound = None if le in ("+Inf", "Inf") else float(le)
            buckets = out.setdefault("_ttft", {})
            buckets[bound] = buckets.get(bound, 0.0) + value
        elif base == "time_to_first_token_seconds_count":
            out["ttft_count"] = out.get("ttft_count", 0.0) + value
        elif base == "time_to_first_token_seconds_sum":
            out["ttft_sum"] = out.get("ttft_sum", 0.0) + value
    for out in ranks.values():
        finish(out)
        if started is not None:
            # the process: a later one is a restart
            out["started"] = started
        buckets = out.pop("_ttft", None)
        if buckets:
            finite = sorted(b for b in buckets if b is not None)
            out["ttft_buckets"] = [[b, buckets[b]] for b in finite] + (
                [[None, buckets[None]]] if None in buckets else []
            )
    return ranks


_TTFT = "time_to_first_token_seconds_"
_KNOWN = {
    "kv_cache_usage_perc",
    "gpu_cache_usage_perc",
    "token_usage",
    "prefix_cache_queries_total",
    "prefix_cache_queries",
    "prefix_cache_hits_total",
    "prefix_cache_hits",
    "cache_hit_rate",
    "num_preemptions_total",
    "num_preemptions",
    "num_requests_running",
    "num_requests_waiting",
    "num_queue_reqs",
    "cache_config_info",
}


def fetch(url: str, timeout: float = 2.0) -> str:
    """The page's text (raises OSError / ValueError when the server does not answer)."""
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (the user's own URL)
        return response.read(8 << 20).decode("utf-8", "replace")
