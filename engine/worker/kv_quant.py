"""Quantized K/V rows (engine/models/kv_precision.py has the scheme): a row of head_dim values becomes head_dim bytes
of int8 or float8 e4m3fn and a float32 scale, stored as head_dim + 4 uint8 in one tensor.

`quantize` runs where K/V are written (the pool, the rings); `dequantize` where attention reads them (a prefix
gathered for a prefill chunk, decodes gathered for SDPA, ring rows). The C decode kernel reads the same bytes itself
(kernels/paged_decode.c), with the same arithmetic: value x scale in float32.
"""

from __future__ import annotations

import torch

from engine.models.kv_precision import KV_DTYPES, SCALE_BYTES, normalize_kv_dtype

_STORED = {"int8": torch.int8, "fp8_e4m3": torch.float8_e4m3fn}


class KVQuantizer:
    def __init__(self, kv_dtype: str):
        self.name = normalize_kv_dtype(kv_dtype)
        self.largest = KV_DTYPES[self.name]
        self.stored = _STORED[self.name]

    def row_width(self, head_dim: int) -> int:
        """uint8 elements of one stored row."""
        return head_dim + SCALE_BYTES

    def quantize(self, x: torch.Tensor) -> torch.Tensor:
        """[..., D] float -> [..., D + 4] uint8: each row's values at its own scale, then the scale's bytes."""
        x = x.float()
        scale = x.abs().amax(-1, keepdim=True) / self.largest
        # an all-zero row keeps scale 1 (0 / 0 would make NaN values)
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        scaled = (x / scale).clamp(-self.largest, self.largest)
        if self.name == "int8":
            values = torch.round(scaled).to(torch.int8)
        else:
            values = scaled.to(torch.float8_e4m3fn)
        return torch.cat([values.view(torch.uint8), scale.view(torch.uint8)], dim=-1)

    def dequantize(self, packed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """[..., D + 4] uint8 -> [..., D] of `dtype`: value x scale (in float32, then `dtype`)."""
        dim = packed.shape[-1] - SCALE_BYTES
        values = packed[..., :dim].view(self.stored).float()
        scale = packed[..., dim:].contiguous().view(torch.float32)
        out = values * scale
        return out if dtype == torch.float32 else out.to(dtype)

    def round_trip(self, x: torch.Tensor) -> torch.Tensor:
        """x as attention reads it back after a write: what a chunk's own new K/V are attended as."""
        return self.dequantize(self.quantize(x), x.dtype)


def quantizer(kv_dtype: str | None) -> KVQuantizer | None:
    """The quantizer of `kv_dtype`; None for the model's own dtype (K/V stored exactly)."""
    return None if kv_dtype is None else KVQuantizer(kv_dtype)
