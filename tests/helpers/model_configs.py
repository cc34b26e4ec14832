"""Model configs the what-if tests price K/V and tiers with, written as a config.json would hold them."""

# a Llama-3-8B-like shape with its MLP: 32 layers, 8 KV heads of 128, bf16 (the tiers' compute cost needs the
# parameters)
LLAMA_3_8B = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "torch_dtype": "bfloat16",
}
