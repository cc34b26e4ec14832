"""Headless commands: generate, record and info run the engine; schema and stats read traces (no torch)."""

from __future__ import annotations

import functools
import re

import click

from kvtui.commands import compare_commands
from kvtui.commands.output_path import output_file
from kvtui.commands.publish_option import open_publisher, publish_option

DTYPES = ("float32", "bfloat16", "float16")


def check_device(ctx, param, value: str | None) -> str | None:
    """--device: auto, cpu, cuda or cuda:N (whether that GPU exists is checked when the model loads)."""
    if value is None or re.fullmatch(r"auto|cpu|cuda(:[0-9]+)?", value):
        return value
    raise click.BadParameter(f"{value!r} is not a device: use auto, cpu, cuda or cuda:N (N = GPU index)")


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
    @click.option("--block-size", default=16, show_default=True, help="Tokens per KV block.")
    @click.option("--num-blocks", type=int, default=None, help="Blocks in the pool [default: 256 MiB of KV].")
    @click.option(
        "--max-batched-tokens",
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
        "--eviction",
        type=click.Choice(["lru", "lfu", "cost"]),
        default="lru",
        show_default=True,
        help="Which cached block goes first when the pool is full: least recently used, least "
        "frequently used, or cheapest to recompute.",
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
    )
    values = {key: options[key] for key in keys}
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


@click.command()
@click.argument("prompt")
@engine_options
@click.option("--max-tokens", default=128, show_default=True)
@click.option("--temperature", default=0.0, show_default=True, help="0 = greedy.")
@click.option("--top-p", default=1.0, show_default=True)
@click.option("--top-k", default=0, show_default=True, help="0 = off.")
@click.option("--seed", type=int, default=None)
@click.option("--raw", is_flag=True, help="Send the prompt as plain text instead of a chat user message.")
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(dir_okay=False),
    callback=output_file,
    help="Also write the trace here.",
)
def generate(prompt, model, max_tokens, temperature, top_p, top_k, seed, raw, trace_path, **options):
    """Generate from PROMPT through the paged cache; stream the text, then print TTFT and TPOT."""
    from engine.core.request import SamplingParams

    engine = load_engine(model, engine_config(**options))
    if trace_path:
        engine.add_trace_file(trace_path)
    try:
        params = SamplingParams(
            max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed
        )
        text = (
            prompt
            if raw or engine.tokenizer is None or not engine.tokenizer.chat_template
            else [{"role": "user", "content": prompt}]
        )
        request_id = engine.submit(text, params)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None

    from engine.models.stream_text import StreamDecoder

    decoder = StreamDecoder(engine.tokenizer) if engine.tokenizer is not None else None

    # whole characters only: an emoji split over byte tokens prints once it is complete
    def stream(event):
        if event["type"] == "token_emitted" and event["request_id"] == request_id:
            click.echo(decoder.push(event["token_id"]) if decoder else event["text"], nl=False)

    engine.trace.listeners.append(stream)
    while engine.has_unfinished():
        engine.step()
    engine.close()
    if decoder is not None:
        click.echo(decoder.flush(), nl=False)
    out = engine.output(request_id)
    tpot = f"{out.tpot * 1000:.1f} ms" if out.tpot is not None else "n/a (one token)"
    # the modes that differ from the defaults, so a pasted summary says how it ran
    modes = [
        name
        for name, on in (
            ("whole-block hits", not engine.config.partial_hits),
            ("no prefix cache", not engine.config.prefix_cache),
        )
        if on
    ]
    click.echo()
    click.echo(
        f"\n-- {len(out.token_ids)} tokens ({out.finish_reason}); TTFT {out.ttft * 1000:.1f} ms; TPOT {tpot}"
        + (f"; {', '.join(modes)}" if modes else ""),
        err=True,
    )


@click.command()
@click.option(
    "--workload",
    "-w",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Workload JSON (see fixtures/workloads/).",
)
@click.option(
    "--out",
    "-o",
    required=True,
    type=click.Path(dir_okay=False),
    callback=output_file,
    help="Trace file to write (JSONL).",
)
@engine_options
@publish_option
def record(workload, out, model, publish, **options):
    """Run a WORKLOAD headless and write its trace to OUT."""
    from engine.workload import WorkloadError, load_workload, run_workload

    try:
        spec = load_workload(workload)
    except WorkloadError as exc:
        raise click.ClickException(str(exc)) from None
    # a bad address fails before the model loads
    publisher = open_publisher(publish) if publish else None
    engine = load_engine(model, engine_config(spec.engine, **options))
    engine.add_trace_file(out)
    if publisher is not None:
        engine.trace.listeners.append(publisher)
        click.echo(f"publishing vLLM KV events on {publisher.endpoint}", err=True)
    from kvtui.bench.machine_probe import emit_roofline

    # this machine's roofline for the model, once, for the roofline view
    emit_roofline(engine)
    # an edited request finishes once more
    total = len(spec.requests) + len(spec.edits)
    done = 0

    def progress(output):
        nonlocal done
        done += 1
        click.echo(
            f"  [{done}/{total}] {output.request_id}: {len(output.token_ids)} tokens, "
            f"{output.cached_tokens} cached, TTFT {output.ttft * 1000:.0f} ms",
            err=True,
        )

    click.echo(f"recording {spec.name}: {total} requests -> {out}", err=True)
    try:
        run_workload(engine, spec, on_finished=progress)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        engine.close()
        if publisher is not None:
            publisher.close()
    click.echo(f"wrote {out}", err=True)


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
    if config_source:
        click.echo(config_info(config_source, tokens, options["dtype"], options["block_size"]))
        return
    engine = load_engine(model, engine_config(**options))
    click.echo(format_info(engine))


def config_info(source: str, tokens: str, dtype: str, block_size: int) -> str:
    from engine.models.kv_budget import ConfigError, format_budget, load_config, shape_from_config

    try:
        counts = [int(t) for t in tokens.replace(" ", "").split(",") if t]
        if not counts or min(counts) < 0:
            raise ValueError
    except ValueError:
        raise click.BadParameter(
            f"{tokens!r}: give a token count or a comma list of them", param_hint="--tokens"
        ) from None
    context = click.get_current_context(silent=True)
    typed = (
        context is not None
        and context.get_parameter_source("dtype") is click.core.ParameterSource.COMMANDLINE
    )
    try:
        config, name = load_config(source)
        shape = shape_from_config(config, name)
        return format_budget(shape, counts, dtype if typed or not shape.dtype else shape.dtype, block_size)
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
    lines = [
        f"model          {shape.name}",
        f"layers         {shape.layers}",
        f"heads          {shape.q_heads} query, {shape.kv_heads} KV ({shape.attention_kind()}), head dim {shape.head_dim}",
        f"dtype          {shape.dtype} ({shape.elem_bytes} bytes)",
    ]
    windows = sorted({w for w in shape.windows if w is not None})
    kinds = f"{len(shape.full_layers)} full" + (
        f", {len(shape.window_layers)} sliding window W={windows}" if windows else ""
    )
    if shape.forced_window is not None:
        kinds += f" (attention sinks: first {shape.sink_tokens} + last {shape.forced_window} on every layer)"
    lines += [
        f"attention      {kinds}",
        "",
        f"KV per token   2 x {shape.kv_heads} kv_heads x {shape.head_dim} x {shape.elem_bytes} B = {per_layer:,} B per layer",
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


@click.command()
def schema():
    """Print the trace file format (every event type and field)."""
    from engine.trace import schema_text

    click.echo(schema_text())


@click.command()
@click.argument("trace_file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object instead of the table: the same figures, rates in 0..1, seconds.",
)
def stats(trace_file, as_json):
    """Hit rates and TTFT / TPOT / ITL percentiles (p50/p95/p99) per workload phase of a TRACE_FILE.

    A bad line stops the summary there (a warning names it); everything before it is counted.
    """
    import json

    from engine.trace import read_trace
    from engine.trace.stats import format_stats, stats_json, summarize

    try:
        # the reader replay uses
        trace = read_trace(trace_file, allow_unknown=True)
    except OSError as exc:
        raise click.ClickException(f"{trace_file}: cannot read it ({exc.strerror or exc})") from None
    if trace.error is not None and not trace.events:
        raise click.ClickException(f"{trace_file}: {trace.error}")
    if trace.error is not None:
        click.echo(
            f"warning: {trace_file}: {trace.error}; summarising the {len(trace.events)} events before it",
            err=True,
        )
    summary = summarize(trace.header, trace.events)
    workers = totals = None
    # recorded by `kvtui attach -o`: one summary per worker, totals from the fleet (no requests: null)
    if trace.header.get("kind") == "attach":
        from kvtui.state.fleet import replay_fleet
        from kvtui.state.fleet_stats import attach_totals, format_workers, workers_summary

        fleet = replay_fleet(trace.header, trace.events)
        workers, totals = workers_summary(fleet), attach_totals(fleet)
    # a cause for every missed prompt token (kvtui/whatif/causes.py), where the trace recorded the matching
    from kvtui.whatif.causes import ledger_from_trace, misses_json, misses_text

    ledger = ledger_from_trace(trace.header, trace.events) if workers is None else None
    if as_json:
        error = None if trace.error is None else str(trace.error)
        out = stats_json(trace_file, trace.header, trace.events, summary, error)
        if workers is not None:
            out.update(totals, phases=[], all=totals)
            out["workers"] = workers
        if ledger is not None:
            out["misses"] = misses_json(ledger)
        click.echo(json.dumps(out, indent=1))
    elif workers is not None:
        click.echo(format_workers(workers))
    else:
        click.echo(format_stats(summary))
        if ledger is not None:
            click.echo(misses_text(ledger))


COMMANDS = [generate, record, info, schema, stats] + compare_commands.COMMANDS
