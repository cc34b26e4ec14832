"""What `kvtui bench tiers` measured on this machine, for the views beside a host tier: loading a block back
against computing its tokens again. Read from the file the bench keeps (kvtui/bench/tiers.py), for the trace's
model and block size only; None when nothing was measured for them."""

from __future__ import annotations

import json
import os
from pathlib import Path


def tier_costs_path() -> Path:
    """In kvtui's cache folder (engine/models/packaged.py's, which a viewer cannot import: it needs no torch)."""
    root = os.environ.get("KVTUI_CACHE_DIR")
    if root:
        return Path(root) / "bench" / "tiers.json"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("kvtui")) / "bench" / "tiers.json"


def measured_tier_costs(model: str | None, block_size: int) -> dict | None:
    """{"load", "recompute", "offload"} seconds per block and when, or None."""
    try:
        data = json.loads(tier_costs_path().read_text())
        per = data["per_block_seconds"]
        if data["model"] != model or data["block_size"] != block_size:
            return None
        return {
            "load": float(per["load"]),
            "recompute": float(per["recompute"]),
            "offload": float(per["offload"]),
            "measured": str(data.get("measured", "")),
            "device": str(data.get("device", "")),
        }
    except (OSError, ValueError, KeyError, TypeError):
        return None
