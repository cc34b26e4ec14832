"""The attention arithmetic of the paged layers: which kernel computes each shape, exactly.

Shapes, and how each runs (q [N, Hq, n, D]; k/v [N, Hkv, L, D]; KV heads are never repeated in the cache):
    a chunk with no prefix        SDPA is_causal over the chunk's own K/V: transformers' own call, its flash path
    a chunk over a cached prefix  the prefix part (every key visible, no mask) and the self part (is_causal)
                                  computed apart and merged by their log-sum-exps (CPU flash kernel), or on CUDA
                                  one SDPA call with a lower-right causal bias (its fused kernels take it); where
                                  neither applies, one SDPA call with an explicit mask
    decodes (the reference plan)  one SDPA call per group of like lengths over its gathered blocks, masked only
                                  where padded (a float32 CPU: the C kernel, engine/worker/kernels/paged_decode.c)
    windows, soft-capped scores   an explicit mask (grouped matmuls when scores are soft-capped)
A mask makes SDPA visit every key block; is_causal skips the upper triangle, which halves a long prefill.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_CPU_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    allowed: torch.Tensor | None,
    scaling: float | None,
    softcap: float | None,
    causal: bool = False,
) -> torch.Tensor:
    """q [N, Hq, n, D], k/v [N, Hkv, L, D], allowed [N, 1, n, L] or None (all visible, or causal) -> [N, Hq, n, D]."""
    if softcap is None:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=allowed, scale=scaling, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1]
        )
    if causal:
        allowed = causal_mask(q.shape[2], k.shape[2], q.device)
    n_batch, hq, n, dim = q.shape
    hkv = k.shape[1]
    grouped = q.view(n_batch, hkv, hq // hkv, n, dim)
    scale = scaling if scaling is not None else dim**-0.5
    scores = grouped @ k.unsqueeze(2).transpose(-1, -2) * scale
    scores = torch.tanh(scores / softcap) * softcap
    if allowed is not None:
        scores = scores.masked_fill(~allowed.unsqueeze(1), float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return (probs @ v.unsqueeze(2)).view(n_batch, hq, n, dim)


def causal_mask(n: int, length: int, device) -> torch.Tensor:
    """[1, 1, n, length]: the n queries are the last n positions of `length` (lower-right aligned)."""
    query_pos = torch.arange(length - n, length, device=device)[:, None]
    return (torch.arange(length, device=device)[None, :] <= query_pos)[None, None]


def _repeat_heads(x: torch.Tensor, groups: int) -> torch.Tensor:
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def chunk_over_prefix(
    q: torch.Tensor,
    k_prefix: torch.Tensor,
    v_prefix: torch.Tensor,
    k_self: torch.Tensor,
    v_self: torch.Tensor,
    scaling: float | None,
    softcap: float | None,
) -> torch.Tensor:
    """q [1, Hq, n, D] at positions [P, P + n); prefix K/V [1, Hkv, P, D] all visible; self K/V [1, Hkv, n, D]
    causal. Same result as one masked SDPA over the P + n keys, with the causal half of the self part skipped."""
    groups = q.shape[1] // k_self.shape[1]
    if softcap is None and q.device.type == "cpu" and _CPU_FLASH is not None:
        # the prefix part has no mask, so a KV head's query heads can be its queries: no copy of the prefix K/V
        _, hq, n, dim = q.shape
        hkv = k_prefix.shape[1]
        stacked = q.reshape(1, hkv, groups * n, dim)
        out_p, lse_p = _CPU_FLASH(stacked, k_prefix, v_prefix, scale=scaling)
        out_s, lse_s = _CPU_FLASH(
            q, _repeat_heads(k_self, groups), _repeat_heads(v_self, groups), is_causal=True, scale=scaling
        )
        return merge(out_p.reshape(1, hq, n, dim), lse_p.reshape(1, hq, n), out_s, lse_s)
    k, v = torch.cat([k_prefix, k_self], dim=2), torch.cat([v_prefix, v_self], dim=2)
    if softcap is None and q.device.type == "cuda":
        from torch.nn.attention.bias import causal_lower_right

        # fused kernels take it; no mask is materialised
        bias = causal_lower_right(q.shape[2], k.shape[2])
        return F.scaled_dot_product_attention(
            q, _repeat_heads(k, groups), _repeat_heads(v, groups), attn_mask=bias, scale=scaling
        )
    return attend(q, k, v, causal_mask(q.shape[2], k.shape[2], q.device), scaling, softcap)


def merge(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor) -> torch.Tensor:
    """Softmax attention over keys A and B from each part's output and log-sum-exp ([N, H, n, D], [N, H, n])."""
    top = torch.maximum(lse_a, lse_b)
    wa, wb = torch.exp(lse_a - top), torch.exp(lse_b - top)
    total = wa + wb
    merged = out_a.float() * (wa / total)[..., None] + out_b.float() * (wb / total)[..., None]
    return merged.to(out_a.dtype)
