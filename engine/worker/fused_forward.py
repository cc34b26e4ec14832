"""A step of a Llama-family model on the CPU without the modules' Python: the same operations in a few C calls
per layer, giving the same bits as the model's own forward through the engine.

Profiled on SmolLM2 (30 layers, 8 decodes, one thread), a decode step spent about 35 ms in the C linears, 3 in
the C attention and 20-25 more in what surrounds them: some 60 torch operators per layer (an RMSNorm is seven,
the rotary embedding ten, the K/V writes two index_puts) and the modules' calls. Here each layer is:

    add_rms_norm (residual add + input norm) -> q, k, v linears -> attention -> o linear
    -> add_rms_norm (residual add + post-attention norm) -> gate, up linears -> the model's own activation x up
    -> down linear

with the linears the run plan's (engine/worker/run_plan.py: the C kernel of packed_linear.py, or the stock
ones, through each module's forward) and the norm and rotary kernels (engine/worker/kernels/decode_ops.c) doing
torch's arithmetic operation for operation. The attention of a decode-only step that the C decode kernel reads
is rope_write (rotary + K/V into the pool) and that kernel, called directly (measured 4% faster a step than
the route below: SmolLM2, 8 decodes, one thread); of any other step the C rotary and then the engine's paged
attention, called as the modules call it. The result equals the module path's bit for bit
(tests/engine/worker/test_fused_forward.py); the norm's sum order is torch's, which `FusedForward.build` checks on
this machine against the model's own norms before it lets the path run.

Only the architectures whose layers are exactly this (Llama, Mistral, Qwen2), paged in every layer (no
windows, no rings), take it; anything else runs the modules.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.worker.attention import paged_attention, read_in_place
from engine.worker.batch import BATCH_KWARG, PagedBatch
from engine.worker.fused_fit import decoder_layers
from engine.worker.kernels import decode_ops
from engine.worker.packed_linear import PackedLinears, bucket, stock_linear


@dataclass
class FusedLayer:
    # the attention module: its layer_idx is the layer's K/V in the pool, its scaling the scores' scale
    attention: torch.nn.Module
    # the norm modules, not their weights: a weight the caller replaces after load is read then
    input_norm: torch.nn.Module
    post_norm: torch.nn.Module
    q_proj: torch.nn.Linear
    k_proj: torch.nn.Linear
    v_proj: torch.nn.Linear
    o_proj: torch.nn.Linear
    gate_proj: torch.nn.Linear
    up_proj: torch.nn.Linear
    down_proj: torch.nn.Linear
    act_fn: torch.nn.Module


def _weight(norm: torch.nn.Module) -> torch.Tensor:
    # _parameters, not norm.weight: nn.Module.__getattr__ costs a microsecond, 61 times a step here
    return norm._parameters["weight"]


class FusedForward:
    def __init__(
        self, model, layers: list[FusedLayer], eps: float, final_norm: torch.nn.Module, head_dim: int
    ):
        self.model = model
        self.layers = layers
        self.eps = eps
        self.final_norm = final_norm
        self.head_dim = head_dim
        # (row bucket, PackedLinears.version) -> each layer's seven products and the head's, for that step
        self._products: dict[tuple[int, int], tuple[list[tuple], object]] = {}

    @classmethod
    def build(cls, model) -> FusedForward | None:
        """The fused path for `model`, a model `fused_fit.why_not` lets through; None where it would not give
        the module path's bits (its norms' epsilons differ, or the C norm sums otherwise than torch here)."""
        inner = model.model
        decoders = decoder_layers(model)
        norms = [inner.norm] + [
            n for layer in decoders for n in (layer.input_layernorm, layer.post_attention_layernorm)
        ]
        eps = {float(getattr(n, "variance_epsilon", getattr(n, "eps", -1.0))) for n in norms}
        if len(eps) != 1 or min(eps) < 0:
            return None
        layers = [
            FusedLayer(
                layer.self_attn,
                layer.input_layernorm,
                layer.post_attention_layernorm,
                layer.self_attn.q_proj,
                layer.self_attn.k_proj,
                layer.self_attn.v_proj,
                layer.self_attn.o_proj,
                layer.mlp.gate_proj,
                layer.mlp.up_proj,
                layer.mlp.down_proj,
                layer.mlp.act_fn,
            )
            for layer in decoders
        ]
        fused = cls(model, layers, eps.pop(), inner.norm, decoders[0].self_attn.head_dim)
        return fused if fused.norms_match(norms) else None

    @torch.inference_mode()
    def norms_match(self, norms, rows: int = 8) -> bool:
        """Whether the C norm gives every one of the model's norms bit for bit on random rows (torch's sum
        kernel on another build or CPU may sum in another order)."""
        generator = torch.Generator().manual_seed(0)
        for norm in norms:
            h = torch.randn(rows, norm.weight.shape[0], generator=generator) * 4
            delta = torch.randn(h.shape, generator=generator)
            expected = norm(h + delta)
            ours = decode_ops.add_rms_norm(h, delta, norm.weight.detach(), self.eps, torch.empty_like(h))
            if not torch.equal(ours, expected):
                return False
        return True

    def products(self, linears: PackedLinears | None, rows: int, kept: int) -> tuple[list[tuple], object]:
        """The step's products, chosen once for its row count (the head's for the rows it keeps): each layer's
        q, k, v, o, gate, up, down, then the head; the kernel where the run plan chose it at those rows, the
        stock linear elsewhere."""
        version = -1 if linears is None else linears.version
        key = (bucket(rows), bucket(kept), version)
        found = self._products.get(key)
        if found is None:
            chosen = {} if linears is None else linears.for_rows(rows)
            head = {} if linears is None else linears.for_rows(kept)

            def product(module, kernels=chosen):
                return kernels.get(module) or stock_linear(module)

            layers = [
                tuple(
                    product(m)
                    for m in (f.q_proj, f.k_proj, f.v_proj, f.o_proj, f.gate_proj, f.up_proj, f.down_proj)
                )
                for f in self.layers
            ]
            found = self._products[key] = (layers, product(self.model.lm_head, head))
        return found

    @staticmethod
    def decodes_only(batch: PagedBatch) -> bool:
        """Whether this step is decodes only, one group read by the C attention kernel: the rotary writes the
        K/V into the pool itself and the kernel is called directly."""
        return (
            not batch.prefills
            and len(batch.decodes) == 1
            and batch.decodes[0].lengths is not None
            and batch.write_slots is not None
        )

    def forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        batch: PagedBatch,
        keep: int | torch.Tensor = 0,
        linears: PackedLinears | None = None,
    ) -> torch.Tensor:
        """Logits [rows kept, vocab] of a step of T rows (ids and positions [1, T]); `keep` as transformers'
        logits_to_keep: 0 every row, an int the last ones, a tensor those rows; `linears` the run plan's."""
        inner = self.model.model
        rows = ids.shape[1]
        kept = rows if isinstance(keep, int) and keep == 0 else (keep if isinstance(keep, int) else len(keep))
        if linears is not None:
            linears.refresh()
        products, head = self.products(linears, rows, kept)
        h = inner.embed_tokens(ids)[0]
        cos, sin = inner.rotary_emb(h[None], positions)
        cos, sin = cos[0].contiguous(), sin[0].contiguous()
        attend = self._decodes(batch, cos, sin) if self.decodes_only(batch) else self._rows(batch, cos, sin)
        x = torch.empty_like(h)
        delta = None
        dim = self.head_dim
        for layer, (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj) in zip(
            self.layers, products
        ):
            decode_ops.add_rms_norm(h, delta, _weight(layer.input_norm), self.eps, x)
            q = q_proj(x).view(rows, -1, dim)
            k = k_proj(x).view(rows, -1, dim)
            v = v_proj(x).view(rows, -1, dim)
            out = o_proj(attend(layer, q, k, v).view(rows, -1))
            decode_ops.add_rms_norm(h, out, _weight(layer.post_norm), self.eps, x)
            gated = layer.act_fn(gate_proj(x))
            gated.mul_(up_proj(x))
            delta = down_proj(gated)
        decode_ops.add_rms_norm(h, delta, _weight(self.final_norm), self.eps, x)
        if isinstance(keep, int) and keep > 0:
            x = x[-keep:]
        elif isinstance(keep, torch.Tensor):
            x = x[keep]
        return head(x)

    @staticmethod
    def _decodes(batch: PagedBatch, cos: torch.Tensor, sin: torch.Tensor):
        """A decode-only step's attention: rotary and the K/V writes in one C call, then the decode kernel."""
        group = batch.decodes[0]
        slots, quant = batch.write_slots, batch.kv.quant

        def attend(layer: FusedLayer, q, k, v) -> torch.Tensor:
            index = layer.attention.layer_idx
            keys, values = batch.kv.keys(index), batch.kv.values(index)
            if quant is None:
                rotated = decode_ops.rope_write(q, k, v, cos, sin, keys, values, slots, torch.empty_like(q))
            else:
                # quantized rows are written by torch, as the module path writes them
                rotated, k = decode_ops.rope(q, k, cos, sin)
                batch.kv.write(index, slots, k.transpose(0, 1), v.transpose(0, 1))
            # [N, Hkv, G, D]: each KV head's query heads
            grouped = rotated.view(q.shape[0], keys.shape[0], -1, q.shape[2])
            return read_in_place(batch, group, index, grouped, layer.attention.scaling)

        return attend

    @staticmethod
    def _rows(batch: PagedBatch, cos: torch.Tensor, sin: torch.Tensor):
        """Any other step's attention (prefill chunks, with or without decodes): rotary in C, then the engine's
        paged attention as the modules call it, on the same layout ([1, heads, T, D] views of [T, heads, D])."""

        def attend(layer: FusedLayer, q, k, v) -> torch.Tensor:
            q, k = decode_ops.rope(q, k, cos, sin)
            layout = [t.transpose(0, 1)[None] for t in (q, k, v)]
            out, _ = paged_attention(
                layer.attention, *layout, None, scaling=layer.attention.scaling, **{BATCH_KWARG: batch}
            )
            return out[0]

        return attend
