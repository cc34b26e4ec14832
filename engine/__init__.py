"""kvtui's instrumented inference engine: a real Hugging Face causal LM on our own paged KV cache."""
