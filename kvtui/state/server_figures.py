"""The figures a fleet row shows from a server's /metrics facts (read into facts by kvtui/sources/prometheus.py
and kvtui/sources/offload_metrics.py): the token hit rate, TTFT quantiles from its histogram and the offloading
tiers' figures, each over the interval since an earlier reading when one is given. Counters and histograms are
cumulative, so rates come from two readings.
"""

from __future__ import annotations

import math


def token_hit_rate(facts: dict, before: dict | None = None) -> float | None:
    """Hit tokens / queried tokens (vLLM's counters; over the interval since `before` when given), or SGLang's
    own hit-rate gauge."""
    if "prefix_queries" in facts:
        queries, hits = facts["prefix_queries"], facts.get("prefix_hits", 0.0)
        if before and "prefix_queries" in before:
            queries, hits = queries - before["prefix_queries"], hits - before.get("prefix_hits", 0.0)
        return hits / queries if queries > 0 else None
    return facts.get("hit_rate")


def histogram_quantile(q: float, buckets: list) -> float | None:
    """Prometheus' histogram_quantile: linear inside the bucket the q-th observation falls in; the largest
    finite bound when it falls in +Inf. `buckets`: [[upper bound or None for +Inf, cumulative count], ...]."""
    if not buckets:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound is None or math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = (bound if bound is not None else lower_bound), count
    return lower_bound


def _delta(facts: dict, before: dict | None, key: str) -> float | None:
    if key not in facts:
        return None
    if before and key in before and facts[key] >= before[key]:
        return facts[key] - before[key]
    return facts[key]


def offload_facts(facts: dict, before: dict | None = None) -> dict:
    """The tiers' figures a fleet row shows, over the interval since `before` when given (else since the
    server started): external_hit_rate (vLLM: connector hit tokens / queried), loaded and stored (bytes,
    or SGLang's tokens, with their unit), host_usage (SGLang: host tokens used / total), capacity_blocks
    (vLLM's CPU tier) and cached_tokens (SGLang's hit tokens by tier). Empty when the page has none."""
    out: dict = {}
    queries, hits = _delta(facts, before, "external_queries"), _delta(facts, before, "external_hits")
    if queries:
        out["external_hit_rate"] = (hits or 0.0) / queries
    for unit, load, store in (
        ("bytes", "offload_load_bytes", "offload_store_bytes"),
        ("tokens", "offload_load_tokens", "offload_store_tokens"),
        ("blocks", "offload_load_blocks", None),
    ):
        loaded, stored = _delta(facts, before, load), _delta(facts, before, store) if store else None
        if loaded is not None or stored is not None:
            out.update(loaded=loaded, stored=stored, unit=unit)
            break
    if facts.get("host_total_tokens"):
        out["host_usage"] = facts.get("host_used_tokens", 0.0) / facts["host_total_tokens"]
    if facts.get("offload_capacity_blocks"):
        out["capacity_blocks"] = facts["offload_capacity_blocks"]
    cached = facts.get("cached_tokens")
    if cached:
        was = (before or {}).get("cached_tokens") or {}
        out["cached_tokens"] = {
            source: value - was.get(source, 0.0) if value >= was.get(source, 0.0) else value
            for source, value in cached.items()
        }
    return out
