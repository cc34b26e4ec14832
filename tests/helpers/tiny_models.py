"""Tiny randomly initialised causal LMs built in the test itself (nothing downloaded), for breadth."""

from __future__ import annotations

import torch
import transformers

COMMON = dict(
    vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3, max_position_embeddings=1024
)

# name -> (config class, extra config fields); heads chosen to cover MHA, GQA and MQA
ARCHITECTURES = {
    "llama-mha": ("LlamaConfig", dict(num_attention_heads=4, num_key_value_heads=4)),
    "llama-gqa": ("LlamaConfig", dict(num_attention_heads=8, num_key_value_heads=2)),
    "llama-mqa": ("LlamaConfig", dict(num_attention_heads=4, num_key_value_heads=1)),
    "qwen2-gqa": ("Qwen2Config", dict(num_attention_heads=4, num_key_value_heads=2)),
    "qwen3-gqa": ("Qwen3Config", dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32)),
    "mistral-mqa": ("MistralConfig", dict(num_attention_heads=4, num_key_value_heads=1, sliding_window=None)),
    "phi3-mha": ("Phi3Config", dict(num_attention_heads=4, num_key_value_heads=4, pad_token_id=0)),
}


def tiny_model(name: str = "llama-gqa", seed: int = 0, **overrides):
    class_name, extra = ARCHITECTURES[name]
    config = getattr(transformers, class_name)(**{**COMMON, **extra, **overrides})
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    # random weights: never stop early, compare full runs
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def random_prompts(lengths, vocab: int = COMMON["vocab_size"], seed: int = 0) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=generator).tolist() for n in lengths]
