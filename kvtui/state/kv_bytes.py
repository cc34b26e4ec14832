"""A trace's bytes per token in words: the formula of its model's shape, spelled by the function `kvtui info`
uses (`describe_row`), so an 8-bit K/V row shows its float32 scale wherever the figure appears."""

from __future__ import annotations

from dataclasses import fields

from engine.models.kv_precision import describe_row
from engine.models.shape import ModelShape

_SHAPE_FIELDS = {f.name for f in fields(ModelShape)}


def header_shape(header: dict) -> ModelShape | None:
    """The model shape a trace header records, stored at the header's K/V precision; None when the header
    has no usable model (an attach recording, a proxy log)."""
    model = header.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("windows"), list):
        return None
    try:
        shape = ModelShape(
            **{k: v for k, v in model.items() if k in _SHAPE_FIELDS} | {"windows": tuple(model["windows"])}
        )
        return shape.with_kv_dtype(header.get("kv_dtype") or model.get("kv_dtype"))
    except (TypeError, ValueError):
        return None


def bytes_per_token_formula(header: dict) -> str:
    """`2 x 30 layers x 3 kv_heads x (64 x 1 B int8 + a 4 B float32 scale)`: what one token costs in the paged
    pool, and where the header's own figure disagrees with it, both."""
    shape = header_shape(header)
    if shape is None:
        return "2 x layers x kv_heads x head_dim x bytes"
    row = describe_row(shape.head_dim, shape.elem_bytes, shape.kv_dtype)
    text = f"2 x {len(shape.paged_layers)} layers x {shape.kv_heads} kv_heads x {row}"
    recorded = header.get("bytes_per_token")
    if recorded != shape.kv_bytes_per_token():
        text += f" = {shape.kv_bytes_per_token():,} B, but the header says {recorded:,} B"
    return text
