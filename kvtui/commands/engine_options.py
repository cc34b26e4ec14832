"""The options every command that loads a model shares (--model, --device, --dtype, the pool and the cache
policy), the `EngineConfig` they make, and loading the engine with one line for a model that cannot load."""

from __future__ import annotations

import functools
import re

import click

from engine.models.kv_precision import KV_DTYPE_CHOICES

DTYPES = ("float32", "bfloat16", "float16")
# past these a pool is a typo: one block of more tokens, or more block ids than any GPU's cache holds
MAX_BLOCK_SIZE = 4096
MAX_NUM_BLOCKS = 2**22


def check_device(ctx, param, value: str | None) -> str | None:
    """--device: auto, cpu, cuda or cuda:N (whether that GPU exists is checked when the model loads)."""
    if value is None or re.fullmatch(r"auto|cpu|cuda(:[0-9]+)?", value):
        return value
    raise click.BadParameter(f"{value!r} is not a device: use auto, cpu, cuda or cuda:N (N = GPU index)")


def check_retention(ctx, param, value: str) -> int | None:
    """--retention-interval: a token count (0 and up), or `all` (None: every window block stays cached)."""
    if value == "all":
        return None
    if value.isdigit():
        return int(value)
    raise click.BadParameter(f"{value!r} is not a retention: give 0, a multiple of --block-size, or all")


def engine_options(func):
    """Options shared by every command that loads a model."""

    @click.option(
        "--model",
        "-m",
        default="smollm2",
        show_default=True,
        help="'smollm2' (embedded), 'gemma3' (Gemma 3 270M base: 15 sliding-window layers, W=512, "
        "and 3 full; plain text, no chat template), a local transformers directory, a .gguf "
        "file, or a hub id.",
    )
    @click.option(
        "--device",
        default="auto",
        show_default=True,
        callback=check_device,
        metavar="auto|cpu|cuda[:N]",
        help="Where the model runs: auto (a GPU if torch sees one), cpu, cuda or cuda:N.",
    )
    @click.option(
        "--dtype",
        type=click.Choice(DTYPES),
        default="float32",
        show_default=True,
        help="Weights and KV cache precision (bfloat16 halves the KV bytes).",
    )
    @click.option(
        "--block-size",
        type=click.IntRange(1, MAX_BLOCK_SIZE),
        default=16,
        show_default=True,
        help="Tokens per KV block.",
    )
    @click.option(
        "--num-blocks",
        type=click.IntRange(1, MAX_NUM_BLOCKS),
        default=None,
        help="Blocks in the pool [default: 256 MiB of KV].",
    )
    @click.option(
        "--max-batched-tokens",
        type=click.IntRange(min=1),
        default=512,
        show_default=True,
        help="Token budget per step; longer prompts are prefilled in chunks.",
    )
    @click.option(
        "--prefix-cache/--no-prefix-cache",
        default=True,
        show_default=True,
        help="Share cached prefixes between requests (radix tree).",
    )
    @click.option(
        "--partial-hits/--whole-blocks",
        default=True,
        show_default=True,
        help="Reuse the leading tokens of a cached block past the last whole one (hits to the token), or "
        "serve whole blocks only and keep no tails, as vLLM and SGLang do.",
    )
    @click.option(
        "--window-layout",
        type=click.Choice(["ring", "paged"]),
        default="ring",
        show_default=True,
        help="Sliding-window layers: per-request rings of W slots, or paged as vLLM pages them (KV-cache "
        "groups sharing the pool, blocks freed as they leave the window, whole-block hits by the hybrid rule).",
    )
    @click.option(
        "--retention-interval",
        metavar="N|all",
        default="0",
        show_default=True,
        callback=check_retention,
        help="With --window-layout paged: which blocks a window group keeps cached, as vLLM's "
        "--prefix-cache-retention-interval: 0 keeps only the blocks a later hit resumes at (before the "
        "prompt's last token and at a shared prefix), N also every N tokens, all keeps every block.",
    )
    @click.option(
        "--eviction",
        type=click.Choice(["lru", "lfu", "cost"]),
        default="lru",
        show_default=True,
        help="Which cached block goes first when the pool is full: least recently used, least "
        "frequently used, or cheapest to recompute.",
    )
    @click.option(
        "--kv-dtype",
        type=click.Choice(KV_DTYPE_CHOICES),
        default=None,
        help="Store K/V at int8 or fp8 (e4m3) with a float32 scale per token and KV head, dequantized on "
        "read: about half bf16's bytes, a quarter of float32's, and a changed answer (kvtui precision) "
        "[default: the model's dtype, exact].",
    )
    @click.option(
        "--host-blocks",
        type=click.IntRange(0, MAX_NUM_BLOCKS),
        default=0,
        show_default=True,
        help="Blocks of host memory below the pool: an evicted cached block is copied there instead of "
        "dropped and loaded back on a prefix hit (a copy, not a recompute: the same answer). 0: one tier.",
    )
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


def engine_config(overrides: dict | None = None, **options):
    from engine.engine import EngineConfig

    keys = (
        "device",
        "dtype",
        "block_size",
        "num_blocks",
        "max_batched_tokens",
        "prefix_cache",
        "partial_hits",
        "eviction",
        "kv_dtype",
        "host_blocks",
        "window_layout",
        "retention_interval",
    )
    values = {key: options[key] for key in keys if key in options}
    # a workload's "engine" section beats the defaults ...
    values.update(overrides or {})
    context = click.get_current_context(silent=True)
    # ... and an option typed on the command line beats the workload
    for key in keys:
        if (
            context is not None
            and context.get_parameter_source(key) is click.core.ParameterSource.COMMANDLINE
        ):
            values[key] = options[key]
    if (
        values.get("window_layout") != "paged"
        and context is not None
        and context.get_parameter_source("retention_interval") is click.core.ParameterSource.COMMANDLINE
    ):
        raise click.UsageError(
            "--retention-interval is for window groups in the pool: add --window-layout paged, or drop it"
        )
    if values.get("window_layout") == "paged":
        # the paged layout serves whole blocks from the device pool, as vLLM does
        typed = [
            name
            for key, name in (("partial_hits", "--partial-hits"), ("host_blocks", "--host-blocks"))
            if context is not None
            and context.get_parameter_source(key) is click.core.ParameterSource.COMMANDLINE
            and values.get(key)
        ]
        if typed:
            raise click.UsageError(
                f"--window-layout paged serves whole blocks from the device pool, as vLLM does: drop "
                f"{' and '.join(typed)}, or use --window-layout ring"
            )
        # a workload's engine section may still ask for partial hits (EngineConfig then says no)
        if "partial_hits" not in (overrides or {}):
            values["partial_hits"] = None
    # a workload's engine section is held to the options' ranges too
    for key, most in (
        ("block_size", MAX_BLOCK_SIZE),
        ("num_blocks", MAX_NUM_BLOCKS),
        ("host_blocks", MAX_NUM_BLOCKS),
    ):
        if isinstance(values.get(key), int) and values[key] > most:
            raise click.UsageError(f"{key} {values[key]} is more than {most}: give a smaller one")
    try:
        return EngineConfig(**values)
    except (TypeError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None


def load_engine(model: str, config):
    from engine.engine import Engine
    from engine.models.loading import ModelLoadError

    try:
        return Engine.load(model, config)
    except ModelLoadError as exc:
        raise click.ClickException(str(exc)) from None
    # torch's out-of-memory errors are RuntimeErrors that say "allocate"
    except (MemoryError, RuntimeError) as exc:
        if not isinstance(exc, MemoryError) and "alloc" not in str(exc).lower():
            raise
        blocks = f"{config.num_blocks} blocks" if config.num_blocks else "the pool"
        raise click.ClickException(
            f"{blocks} of {config.block_size} tokens do not fit in memory on {config.device}: give a smaller "
            "--num-blocks or --block-size"
        ) from None
