"""The oracle: transformers' own forward without any cache, and its own greedy generate."""

from __future__ import annotations

import torch

from engine.models.loading import stock_attention


@torch.inference_mode()
def no_cache_logits(model, token_ids: list[int]) -> torch.Tensor:
    """Logits at every position of `token_ids` from one plain forward, [len, vocab] float32."""
    device = next(model.parameters()).device
    with stock_attention(model):
        return model(torch.tensor([token_ids], device=device), use_cache=False).logits[0].float()


@torch.inference_mode()
def greedy_generate(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    device = next(model.parameters()).device
    ids = torch.tensor([prompt], device=device)
    with stock_attention(model):
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False
        )
    return out[0, len(prompt) :].tolist()
