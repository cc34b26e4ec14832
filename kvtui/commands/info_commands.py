"""`kvtui info`: a model's KV cache shape and the byte arithmetic of the pool, from the loaded engine or, with
--config, from any model's config.json alone (engine/models/kv_budget.py)."""

from __future__ import annotations

import click

from engine.models.kv_precision import describe_row
from kvtui.commands.engine_options import engine_config, engine_options, load_engine

# a thousand times the longest context windows: past it a count is a typo, and its bytes mean nothing
MAX_TOKENS = 10**10


@click.command()
@engine_options
@click.option(
    "--config",
    "config_source",
    metavar="FILE|DIR|HUB-ID",
    help="Any model's config.json (or a directory holding one, or a hub id): KV bytes from the config "
    "alone, no weights loaded: MHA / GQA / MQA side by side, window layers, block rounding.",
)
@click.option(
    "--tokens",
    default="8192",
    show_default=True,
    metavar="N[,N...]",
    help="With --config: tokens in the cache; a comma list for several sequences (each rounded up "
    "to whole blocks of --block-size).",
)
def info(model, config_source, tokens, **options):
    """Print the model's KV cache shape and the byte arithmetic of the pool.

    \b
    With --config, any model's KV bytes without loading it, e.g. the seed example:
      kvtui info --config llama-8b/config.json --tokens 8192 --dtype bfloat16
    (32 layers, 8 KV heads, head_dim 128, bf16, 8,192 tokens = 1 GiB; MHA 4 GiB, MQA 128 MiB)
    """
    typed = (
        click.get_current_context().get_parameter_source("tokens") is click.core.ParameterSource.COMMANDLINE
    )
    # without --config the loaded engine's pool is described: a token count would change nothing
    if typed and not config_source:
        raise click.UsageError("--tokens counts a config's KV bytes: give --config FILE too")
    if config_source:
        click.echo(
            config_info(config_source, tokens, options["dtype"], options["block_size"], options["kv_dtype"])
        )
        return
    engine = load_engine(model, engine_config(**options))
    click.echo(format_info(engine))


def config_info(source: str, tokens: str, dtype: str, block_size: int, kv_dtype: str | None = None) -> str:
    from engine.models.kv_budget import ConfigError, format_budget, load_config, shape_from_config
    from engine.models.kv_precision import normalize_kv_dtype

    try:
        counts = [int(t) for t in tokens.replace(" ", "").split(",") if t]
        if not counts or min(counts) < 0:
            raise ValueError
    except ValueError:
        raise click.BadParameter(
            f"{tokens!r}: give a token count or a comma list of them", param_hint="--tokens"
        ) from None
    if max(counts) > MAX_TOKENS:
        raise click.BadParameter(
            f"{max(counts)} tokens is more than any KV cache holds: give at most {MAX_TOKENS:,} per sequence",
            param_hint="--tokens",
        )
    context = click.get_current_context(silent=True)
    typed = (
        context is not None
        and context.get_parameter_source("dtype") is click.core.ParameterSource.COMMANDLINE
    )
    try:
        config, name = load_config(source)
        shape = shape_from_config(config, name)
        chosen = dtype if typed or not shape.dtype else shape.dtype
        return format_budget(shape, counts, chosen, block_size, normalize_kv_dtype(kv_dtype))
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    # a field of the wrong kind ("num_hidden_layers": "abc"): name it
    except (TypeError, ValueError) as exc:
        raise click.ClickException(f"{source}: {_bad_field(config, exc)}") from None


def _bad_field(config: dict, exc: Exception) -> str:
    """Which whole-number field of a model config is not one, or the error itself."""
    inner = config.get("text_config")
    for part in (config, inner if isinstance(inner, dict) else {}):
        for key, value in part.items():
            number = isinstance(value, int) and not isinstance(value, bool)
            if key.startswith(("num_", "head_dim", "hidden_size", "sliding_window")) and not (
                value is None or number or isinstance(value, (list, dict))
            ):
                return f"{key} is {value!r}, not a whole number: fix the config"
    return f"not a usable model config ({exc})"


def format_info(engine) -> str:
    shape, pool, kv = engine.shape, engine.cache.pool, engine.kv
    per_layer = shape.kv_bytes_per_token_per_layer()
    row = describe_row(shape.head_dim, shape.elem_bytes, shape.kv_dtype)
    lines = [
        f"model          {shape.name}",
        f"layers         {shape.layers}",
        f"heads          {shape.q_heads} query, {shape.kv_heads} KV ({shape.attention_kind()}), head dim {shape.head_dim}",
        f"dtype          {shape.dtype} ({shape.elem_bytes} bytes)",
    ]
    if shape.kv_dtype is not None:
        exact = shape.with_kv_dtype(None).kv_bytes_per_token_per_layer()
        lines.append(
            f"K/V stored     {shape.kv_dtype}, a float32 scale per token and KV head; dequantized on read "
            f"({exact / per_layer:.2f}x the tokens of {shape.dtype} in the same bytes)"
        )
    windows = sorted({w for w in shape.windows if w is not None})
    kinds = f"{len(shape.full_layers)} full" + (
        f", {len(shape.window_layers)} sliding window W={windows}" if windows else ""
    )
    if shape.forced_window is not None:
        kinds += f" (attention sinks: first {shape.sink_tokens} + last {shape.forced_window} on every layer)"
    lines += [
        f"attention      {kinds}",
        "",
        f"KV per token   2 x {shape.kv_heads} kv_heads x {row} = {int(per_layer):,} B per layer",
        f"full layers    x {len(shape.paged_layers)} paged layers = {shape.kv_bytes_per_token():,} B per token "
        "(grows with the sequence)",
        f"KV per block   x {pool.block_size} tokens = {shape.kv_bytes_per_block(pool.block_size):,} B",
        f"pool           {pool.num_blocks} blocks = {pool.num_blocks * pool.block_size:,} tokens = "
        f"{shape.kv_bytes_per_block(pool.block_size) * pool.num_blocks:,} B (formula)",
        f"pool tensor    {kv.nbytes:,} B allocated ({kv.nbytes / 2**20:.1f} MiB)"
        + ("" if shape.paged_layers else " (no full-attention layer: the pool keeps block tables only)"),
    ]
    if windows:
        groups = {}
        for w in shape.windows:
            if w is not None:
                groups[w] = groups.get(w, 0) + 1
        terms = " + ".join(
            f"{n} x ({shape.sink_tokens} + {w})" if shape.sink_tokens else f"{n} x {w}"
            for w, n in groups.items()
        )
        ring = shape.ring_bytes_per_request()
        lines += [
            "window layers  ring of S + W slots per layer (slot = position mod W), constant however long it runs:",
            f"               {terms} slots x {per_layer:,} B = {ring:,} B per request",
        ]
        rings = engine.cache.rings
        if rings.enabled:
            lines.append(
                f"ring tensors   {rings.nbytes:,} B allocated now ({len(rings.states)} requests); "
                f"snapshots every {rings.interval} positions, budget {rings.snapshot_budget:,} B"
            )
    if shape.kv_heads != shape.q_heads:
        mha = per_layer * shape.q_heads // shape.kv_heads
        lines.append(
            f"vs MHA         {mha:,} B per token per layer if every query head kept its own K/V "
            f"({shape.q_heads // shape.kv_heads}x more)"
        )
    return "\n".join(lines)


COMMANDS = [info]
