"""The server's cache settings as vLLM publishes them on /metrics (`vllm:cache_config_info`, one gauge whose
labels are its CacheConfig): what `kvtui proxy` writes into each record as `server`, and what `kvtui whatif`
replays a proxy log at by default.

    {"block_size": 32, "num_gpu_blocks": 128, "enable_prefix_caching": true}
"""

from __future__ import annotations

import re

_LINE = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def cache_config(metrics_text: str) -> dict | None:
    """The first engine's settings from a /metrics page, or None when it has no cache_config_info."""
    match = _LINE.search(metrics_text)
    if match is None:
        return None
    labels = dict(_LABEL.findall(match.group("labels")))
    out: dict = {}
    for key in ("block_size", "num_gpu_blocks"):
        if labels.get(key, "").isdigit():
            out[key] = int(labels[key])
    if "enable_prefix_caching" in labels:
        out["enable_prefix_caching"] = labels["enable_prefix_caching"].lower() == "true"
    return out or None
