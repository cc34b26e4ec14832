"""kvtui: a terminal visual debugger for the KV cache of LLM inference."""

__version__ = "0.1.0"
