"""kvtui's instrumented inference engine: a real Hugging Face causal LM on our own paged KV cache.

    from engine import Engine, EngineConfig, SamplingParams, RequestOutput

The names are resolved on first use (PEP 562), so `import engine.trace` (the trace reader the torch-free viewer
uses) never imports torch or transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

_FACADE = {
    "Engine": "engine.engine",
    "EngineConfig": "engine.config",
    "SamplingParams": "engine.core.request",
    "RequestOutput": "engine.core.request",
}

__all__ = list(_FACADE)

if TYPE_CHECKING:  # pragma: no cover
    from engine.config import EngineConfig  # noqa: F401
    from engine.core.request import RequestOutput, SamplingParams  # noqa: F401
    from engine.engine import Engine  # noqa: F401


def __getattr__(name: str):
    module = _FACADE.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
