"""The oracle for 8-bit K/V, written apart from the engine: per-(token, KV head) quantization from its definition,
and transformers' own forward with every layer's K and V rounded that way before its attention.

Quantizing a row never looks at another row, so a cache that stores each written row quantized and attends to what
it reads back computes exactly this forward, up to float rounding (and RecordedKV's rounding edges): the engine's
logits are held to it as its exact cache is held to the plain forward.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask
from transformers.models.llama.modeling_llama import eager_attention_forward

from engine.models.loading import stock_attention
from engine.worker.attention import ATTENTION_NAME, paged_attention

# the float8 e4m3fn values of codes 0..126 (0x7F is NaN), from the format: bias 7, 3 mantissa bits
_E4M3 = torch.tensor(
    [(c & 7) / 8 * 2.0**-6 if c >> 3 == 0 else (1 + (c & 7) / 8) * 2.0 ** ((c >> 3) - 7) for c in range(127)],
    dtype=torch.float64,
)
LARGEST = {"int8": 127.0, "fp8_e4m3": 448.0}


def _nearest_e4m3(y: torch.Tensor) -> torch.Tensor:
    """|y| <= 448 to the nearest e4m3 value, ties to the even code (IEEE round to nearest even)."""
    magnitude = y.abs().double().contiguous()
    above = torch.searchsorted(_E4M3, magnitude).clamp(max=126)
    below = (above - 1).clamp(min=0)
    lo, hi = _E4M3[below], _E4M3[above]
    pick_hi = (hi - magnitude < magnitude - lo) | ((hi - magnitude == magnitude - lo) & (above % 2 == 0))
    return torch.where(pick_hi, hi, lo).float() * torch.sign(y)


def reference_round_trip(x: torch.Tensor, kv_dtype: str) -> torch.Tensor:
    """Each row of the last dimension quantized at scale max |row| / LARGEST (an all-zero row: scale 1), then
    dequantized (value x scale, float32), back in x's dtype."""
    rows = x.float()
    scale = rows.abs().amax(-1, keepdim=True) / LARGEST[kv_dtype]
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    y = (rows / scale).clamp(-LARGEST[kv_dtype], LARGEST[kv_dtype])
    # torch.round: half to even, the rounding of C's rint that vLLM's int8 writer uses
    stored = torch.round(y) if kv_dtype == "int8" else _nearest_e4m3(y)
    return (stored * scale).to(x.dtype)


class RecordedKV:
    """The K/V each layer's attention in an engine received (before it quantized them), by layer and the token
    prefix that ends at the position: what its cache stored, and what a later hit on that prefix reads. And every
    attention output row checked against softmax attention (float64) over the recorded K/V of its prefix rounded
    by the reference: `worst`, the largest difference.

    A value within float noise of a rounding edge may round to either side: the engine computes K/V in other
    batch shapes than a plain forward does, so the two may store values one step apart. The reference forward
    rounds the engine's own K/V (after checking they are the forward's own within float noise), so what is left
    between the two is float noise, as for the exact cache.
    """

    def __init__(self, kv_dtype: str):
        # (layer, token prefix) -> (key, value) [Hkv, D]
        self.rows: dict[tuple[int, tuple[int, ...]], tuple[torch.Tensor, torch.Tensor]] = {}
        # each forward's flat rows: the token prefix each one ends
        self.prefixes: list[tuple[int, ...]] = []
        self.kv_dtype = kv_dtype
        # the largest difference of any attention output row from _attention's, and how many rows were checked
        self.worst = 0.0
        self.checked = 0

    def _attention(self, layer, q, prefix, window, sinks, scaling=None, softcap=None, **_) -> torch.Tensor:
        """[Hq, D] float64: softmax attention of one query over the K/V recorded for its prefix, each rounded by
        reference_round_trip, the keys a window and its sinks let it see."""
        position = len(prefix) - 1
        seen = [k for k in range(position + 1) if window is None or k > position - window or k < sinks]
        keys = torch.stack([self.rows[(layer, prefix[: k + 1])][0] for k in seen], dim=1)
        values = torch.stack([self.rows[(layer, prefix[: k + 1])][1] for k in seen], dim=1)
        keys = reference_round_trip(keys, self.kv_dtype).double()
        values = reference_round_trip(values, self.kv_dtype).double()
        # [Hq, D]: each query head reads its KV head
        groups = q.shape[0] // keys.shape[0]
        keys, values = keys.repeat_interleave(groups, 0), values.repeat_interleave(groups, 0)
        scale = scaling if scaling is not None else q.shape[-1] ** -0.5
        scores = torch.einsum("hd,hld->hl", q.double(), keys) * scale
        if softcap:
            scores = softcap * torch.tanh(scores / softcap)
        return torch.einsum("hl,hld->hd", torch.softmax(scores, -1), values)

    @contextmanager
    def recording(self, engine):
        """While open, every forward of `engine` records its K/V (its runner must run the modules: a fused step
        calls no attention function)."""
        runner = engine.runner
        build = runner.build_batch

        def noting(chunks, probe=False):
            self.prefixes = [
                tuple(c.request.tokens[: c.start + i + 1]) for c in chunks for i in range(c.num_tokens)
            ]
            return build(chunks, probe)

        shape = engine.shape

        def attention(module, query, key, value, *args, **kwargs):
            layer = module.layer_idx
            for row, prefix in enumerate(self.prefixes):
                self.rows[(layer, prefix)] = (key[0, :, row].clone(), value[0, :, row].clone())
            out, weights = paged_attention(module, query, key, value, *args, **kwargs)
            window = shape.windows[layer]
            for row, prefix in enumerate(self.prefixes):
                expected = self._attention(
                    layer, query[0, :, row], prefix, window, shape.sink_tokens, **kwargs
                )
                self.worst = max(self.worst, (out[0, row].double() - expected).abs().max().item())
                self.checked += 1
            return out, weights

        runner.build_batch = noting
        AttentionInterface.register(ATTENTION_NAME, attention)
        try:
            yield self
        finally:
            AttentionInterface.register(ATTENTION_NAME, paged_attention)
            runner.build_batch = build


def _round_trip_attention(base, kv_dtype: str):
    def attention(module, query, key, value, *args, **kwargs):
        recorded, tokens = _CURRENT.get("recorded"), _CURRENT.get("tokens")
        if recorded is not None:
            key, value = key.clone(), value.clone()
            for p in range(len(tokens)):
                row = recorded.rows.get((module.layer_idx, tuple(tokens[: p + 1])))
                if row is not None:
                    torch.testing.assert_close(row[0], key[0, :, p], rtol=1e-4, atol=1e-5)
                    torch.testing.assert_close(row[1], value[0, :, p], rtol=1e-4, atol=1e-5)
                    key[0, :, p], value[0, :, p] = row
        return base(
            module,
            query,
            reference_round_trip(key, kv_dtype),
            reference_round_trip(value, kv_dtype),
            *args,
            **kwargs,
        )

    return attention


# the sequence the reference forward runs and the engine's K/V it rounds (RecordedKV), while it runs
_CURRENT: dict = {}

# each with the masks of the attention it wraps (a sliding window's too)
for _dtype in LARGEST:
    AttentionInterface.register(f"test_{_dtype}_sdpa", _round_trip_attention(sdpa_attention_forward, _dtype))
    AttentionInterface.register(
        f"test_{_dtype}_eager", _round_trip_attention(eager_attention_forward, _dtype)
    )
    AttentionMaskInterface.register(f"test_{_dtype}_sdpa", sdpa_mask)
    AttentionMaskInterface.register(f"test_{_dtype}_eager", eager_mask)


@torch.inference_mode()
def quantized_no_cache_logits(
    model, token_ids: list[int], kv_dtype: str, eager: bool = False, recorded: RecordedKV | None = None
) -> torch.Tensor:
    """Logits at every position of `token_ids` from one plain forward whose K/V are rounded to `kv_dtype`;
    eager: transformers' eager attention (soft-capped scores); recorded: round the engine's K/V where it
    computed them."""
    device = next(model.parameters()).device
    _CURRENT.update(recorded=recorded, tokens=list(token_ids))
    try:
        with stock_attention(model, f"test_{kv_dtype}_{'eager' if eager else 'sdpa'}"):
            return model(torch.tensor([token_ids], device=device), use_cache=False).logits[0].float()
    finally:
        _CURRENT.clear()


def assert_outputs_match_quantized(
    model, outputs, kv_dtype: str, recorded: RecordedKV, eager: bool = False, tol: float = 1e-4
) -> None:
    """Each output's logits (SamplingParams(return_logits=True)) against the quantized no-cache forward."""
    for out in outputs:
        sequence = out.prompt_token_ids + out.token_ids
        ref = quantized_no_cache_logits(model, sequence, kv_dtype, eager, recorded)
        start = len(out.prompt_token_ids) - 1
        diff = (out.logits - ref[start : start + len(out.token_ids)]).abs().max().item()
        assert diff <= tol, f"{out.request_id}: max abs logit diff {diff} against the {kv_dtype} forward"
