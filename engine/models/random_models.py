"""`--model random:ARCH:SIZE`: a real architecture's shape with random weights, so benchmarks need no download.

The configs copy the published shapes (layers, heads, KV heads, head size, MLP width, vocabulary, rope) of the
named checkpoints; the weights are transformers' own random initialisation, made directly on the target device
(a 1B model appears in a second on a GPU). Tokens come out as ids: there is no tokenizer, so prompts are token
ids (the benchmarks make their own). Speed is a property of the shape, not of the weights: what these measure
is what the real checkpoint would cost.
"""

from __future__ import annotations

import torch

# name -> (config class, fields): the shape of the published checkpoint named in the comment
SHAPES: dict[str, tuple[str, dict]] = {
    # the long-context bench's model: 2 layers, 4 query / 2 KV heads
    "llama:tiny": (
        "LlamaConfig",
        dict(
            vocab_size=256,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=32768,
        ),
    ),
    # HuggingFaceTB/SmolLM2-135M
    "smollm2:135m": (
        "LlamaConfig",
        dict(
            vocab_size=49152,
            hidden_size=576,
            intermediate_size=1536,
            num_hidden_layers=30,
            num_attention_heads=9,
            num_key_value_heads=3,
            max_position_embeddings=8192,
            rope_theta=100000.0,
            tie_word_embeddings=True,
        ),
    ),
    # meta-llama/Llama-3.2-1B
    "llama:1b": (
        "LlamaConfig",
        dict(
            vocab_size=128256,
            hidden_size=2048,
            intermediate_size=8192,
            num_hidden_layers=16,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=64,
            max_position_embeddings=131072,
            tie_word_embeddings=True,
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=500000.0,
                factor=32.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=8192,
            ),
        ),
    ),
    # meta-llama/Llama-3.1-8B
    "llama:8b": (
        "LlamaConfig",
        dict(
            vocab_size=128256,
            hidden_size=4096,
            intermediate_size=14336,
            num_hidden_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            head_dim=128,
            max_position_embeddings=131072,
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=500000.0,
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=8192,
            ),
        ),
    ),
    # Qwen/Qwen2.5-0.5B
    "qwen2:0.5b": (
        "Qwen2Config",
        dict(
            vocab_size=151936,
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            max_position_embeddings=32768,
            rope_theta=1000000.0,
            tie_word_embeddings=True,
            use_sliding_window=False,
        ),
    ),
    # Qwen/Qwen3-0.6B
    "qwen3:0.6b": (
        "Qwen3Config",
        dict(
            vocab_size=151936,
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            max_position_embeddings=40960,
            rope_theta=1000000.0,
            tie_word_embeddings=True,
            use_sliding_window=False,
        ),
    ),
}


def random_config(spec: str):
    """The transformers config for 'random:ARCH:SIZE' (a trailing '-shape' is allowed: random:llama:8b-shape)."""
    import transformers

    from engine.models.shape import ModelLoadError

    name = spec.removeprefix("random:").removesuffix("-shape")
    if name not in SHAPES:
        raise ModelLoadError(f"unknown random model {spec!r}: choose random:" + ", random:".join(SHAPES))
    class_name, fields = SHAPES[name]
    config = getattr(transformers, class_name)(**fields)
    config._name_or_path = f"random:{name}"
    return config


def random_model(spec: str, dtype: torch.dtype, device: torch.device):
    """(model, None, name): random weights of the shape, made on `device` in `dtype`; no tokenizer."""
    from transformers import AutoModelForCausalLM

    config = random_config(spec)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    # random weights: never stop early, every run the same length
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model, None, config._name_or_path
