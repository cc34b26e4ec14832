"""`kvtui bench long | overhead | mixed | prefix`: the engine's speed where KV caches matter, against baselines
measured in the same run (added to the `kvtui bench` group in bench_commands.py)."""

from __future__ import annotations

import click

from kvtui.commands.engine_options import engine_config, engine_options, load_engine


def _say(msg: str) -> None:
    click.echo(f"  {msg}", err=True)


def _ints(ctx, param, value: str) -> tuple[int, ...]:
    try:
        numbers = tuple(int(x) for x in value.split(","))
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: give whole numbers separated by commas, e.g. 1024,4096"
        ) from None
    if not numbers or min(numbers) < 1:
        raise click.BadParameter(f"{value!r}: every number must be at least 1")
    return numbers


def _threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


THREADS = click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="torch CPU threads for both systems (on a shared machine, 1 is the least noisy).",
)
REPEATS = click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Rounds; each round runs the engine and its baseline back to back, medians reported.",
)


@click.command("long", short_help="Long-context prefill and decode vs transformers (tiny random Llama).")
@click.option(
    "--lengths",
    default="2048,8192,16384",
    show_default=True,
    callback=_ints,
    help="Prefill lengths in tokens.",
)
@click.option(
    "--decode-after",
    type=click.IntRange(min=1),
    default=8192,
    show_default=True,
    help="Decode after a prompt of this many tokens.",
)
@click.option(
    "--decode-tokens",
    type=click.IntRange(min=2),
    default=32,
    show_default=True,
    help="Decode steps timed per round.",
)
@click.option(
    "--max-batched-tokens",
    type=click.IntRange(min=1),
    default=512,
    show_default=True,
    help="The engine's chunk budget (a prefill longer than this runs in chunks over its own prefix).",
)
@REPEATS
@THREADS
def long_bench(lengths, decode_after, decode_tokens, max_batched_tokens, repeats, threads):
    """Long-context prefill and decode, the engine against transformers: a random 2-layer Llama (4 query, 2 KV
    heads; nothing downloaded) makes the model's own work cheap, so what the engine adds shows. Prefill N tokens
    vs transformers' no-cache forward; decode after N tokens vs transformers' forward with its DynamicCache.
    Ratio = engine / transformers (<= 1.2 is the target).

    \b
    Examples:
      kvtui bench long
      kvtui bench long --lengths 2048 --decode-after 2048 --repeats 5 --threads 1
    """
    from kvtui.bench.long_context import format_long_context, run_long_context

    _threads(threads)
    click.echo(
        format_long_context(
            run_long_context(lengths, decode_after, decode_tokens, repeats, max_batched_tokens, progress=_say)
        )
    )


@click.command("overhead", short_help="Engine time per step beyond the model's forward, by context size.")
@engine_options
@click.option(
    "--contexts",
    default="1024,4096,8192",
    show_default=True,
    callback=_ints,
    help="Context sizes (prompt tokens; capped by the model's positions).",
)
@click.option(
    "--steps", type=click.IntRange(min=2), default=32, show_default=True, help="Decode steps timed."
)
@THREADS
def overhead_bench(model, contexts, steps, threads, **options):
    """One stream: every step is timed whole and its model call alone; overhead = step - model (scheduling,
    block tables, slot maps, sampling, trace, prefix bookkeeping). Target: <= 5% of a step, flat in context.

    \b
    Examples:
      kvtui bench overhead                         SmolLM2 at 1k, 4k and 8k tokens
      kvtui bench overhead -m random:llama:1b --dtype bfloat16 --device cuda
    """
    from kvtui.bench.overhead import format_overhead, measure_overhead

    _threads(threads)
    need = max(contexts) + steps + 64
    engine = load_engine(
        model,
        engine_config({"prefix_cache": False, "num_blocks": -(-need // 16) + 8, "block_size": 16}, **options),
    )
    click.echo(f"overhead on {engine.shape.name} ({engine.shape.dtype}, {engine.kv.kv.device})", err=True)
    click.echo(format_overhead(measure_overhead(engine, contexts, steps, progress=_say)))


@click.command(
    "mixed", short_help="N concurrent mixed-length requests vs padded generate and generate_batch."
)
@engine_options
@click.option(
    "--requests",
    "count",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Concurrent requests.",
)
@click.option(
    "--lengths",
    default="16,512",
    show_default=True,
    callback=_ints,
    help="Shortest,longest prompt (uniform between).",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Tokens generated per request.",
)
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True, help="Rounds.")
@click.option(
    "--generate-batch/--no-generate-batch",
    default=True,
    show_default=True,
    help="Also run transformers' generate_batch (slow on a CPU: minutes for what takes seconds here).",
)
@THREADS
def mixed_bench(model, count, lengths, max_tokens, repeats, generate_batch, threads, **options):
    """Every prompt at once: our continuous batching vs transformers' generate on one left-padded batch and
    vs its own continuous batching (generate_batch). Targets: >= 1.5x and >= 2x their throughput.

    \b
    Examples:
      kvtui bench mixed
      kvtui bench mixed --requests 8 --lengths 16,64 --max-tokens 8      a quick one
      kvtui bench mixed -m random:llama:1b --dtype bfloat16 --device cuda
    """
    from kvtui.bench.mixed import format_mixed, run_mixed

    if len(lengths) != 2 or lengths[0] > lengths[1]:
        raise click.BadParameter("give two numbers, shortest,longest", param_hint="--lengths")
    _threads(threads)
    engine = load_engine(model, engine_config({"prefix_cache": False, "max_num_seqs": count}, **options))
    click.echo(
        format_mixed(
            run_mixed(
                engine,
                count,
                lengths[0],
                lengths[1],
                max_tokens,
                repeats,
                progress=_say,
                generate_batch_too=generate_batch,
            )
        )
    )


@click.command("prefix", short_help="Shared-prefix workloads: throughput and TTFT, prefix cache on vs off.")
@engine_options
@click.option(
    "--workload",
    "workloads",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Workload file(s) [default: the shared-system and shared-background fixtures].",
)
@REPEATS
@THREADS
def prefix_bench(model, workloads, repeats, threads, **options):
    """Each round replays the workload on a fresh engine with the prefix cache on, then off: throughput
    (generated tokens per second) and TTFT p50 / p95. Target: >= 2x the throughput with the cache.

    \b
    Examples:
      kvtui bench prefix
      kvtui bench prefix --workload fixtures/workloads/shared_system_8users.json --repeats 5
    """
    from engine.workload import WorkloadError, load_workload
    from kvtui.bench.prefix import DEFAULT_WORKLOADS, format_prefix, run_prefix

    # a bad workload is said before the model loads
    for path in workloads:
        try:
            load_workload(path)
        except WorkloadError as exc:
            raise click.ClickException(str(exc)) from None
    _threads(threads)
    engine = load_engine(model, engine_config({"prefix_cache": True}, **options))
    click.echo(format_prefix(run_prefix(engine, workloads or DEFAULT_WORKLOADS, repeats, progress=_say)))


@click.command("decode", short_help="Decode tok/s at batch sizes B and the share of memory bandwidth used.")
@engine_options
@click.option("--batches", default="1,8,64", show_default=True, callback=_ints, help="Batch sizes.")
@click.option(
    "--prompt-tokens",
    type=click.IntRange(min=1),
    default=512,
    show_default=True,
    help="Prompt length of every request.",
)
@click.option(
    "--steps", type=click.IntRange(min=2), default=64, show_default=True, help="Decode steps timed."
)
@click.option(
    "--peak-tbs",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="The memory's peak bandwidth in TB/s [default: on CUDA 4.8, the H200's HBM3e; on the CPU none, and a "
    "copy's bandwidth is measured in the run instead].",
)
@click.option(
    "--copy-tbs",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="A measured device-copy bandwidth in TB/s to compare with as well (H200: about 4.3; on the CPU "
    "measured in the run when no --peak-tbs is given).",
)
@click.option(
    "--contexts",
    default="2048,8192",
    show_default=True,
    callback=_ints,
    help="With --kv-dtype: context lengths decoded after.",
)
@REPEATS
@THREADS
def decode_bench(
    model, batches, prompt_tokens, steps, peak_tbs, copy_tbs, contexts, repeats, threads, **options
):
    """Decode throughput at each batch size; each step reads every weight and every sequence's K/V once, so
    bytes per step / step time is the bandwidth the engine draws, shown against the memory's peak.

    \b
    With --kv-dtype: decode after each of --contexts with 8-bit K/V against the same model storing K/V exactly,
    rounds alternating between the two (--repeats rounds of --steps steps; batch: the first of --batches,
    1 unless given).

    
    Examples:
      kvtui bench decode -m random:llama:1b --dtype bfloat16 --device cuda --copy-tbs 4.3
      kvtui bench decode -m random:llama:tiny --batches 1,4 --prompt-tokens 64 --steps 8 --peak-tbs 0.02
      kvtui bench decode --kv-dtype int8 --contexts 2048,8192 --steps 16 --repeats 5 --threads 2
    """
    from engine.worker.machine_probe import copy_bandwidth
    from kvtui.bench.decode import format_decode, measure_decode

    _threads(threads)
    if options.get("kv_dtype"):
        typed = click.get_current_context().get_parameter_source("batches")
        batch = batches[0] if typed is click.core.ParameterSource.COMMANDLINE else 1
        return _decode_precision(model, contexts, batch, steps, repeats, options)
    need = max(batches) * (prompt_tokens + steps + 8)
    engine = load_engine(
        model,
        engine_config(
            {
                "prefix_cache": False,
                "max_num_seqs": max(batches),
                "num_blocks": -(-need // 16) + max(batches) + 8,
                "block_size": 16,
            },
            **options,
        ),
    )
    click.echo(f"decode on {engine.shape.name} ({engine.shape.dtype}, {engine.kv.kv.device})", err=True)
    click.echo(engine.runner.plan.describe(), err=True)
    device = engine.kv.kv.device
    if peak_tbs is None and device.type == "cuda":
        peak_tbs = 4.8
    if peak_tbs is None and copy_tbs is None:
        copy_tbs = copy_bandwidth(device) / 1e12
    click.echo(
        format_decode(
            measure_decode(engine, batches, prompt_tokens, steps, progress=_say), peak_tbs, copy_tbs
        )
    )


def _decode_precision(model: str, contexts, batch: int, steps: int, rounds: int, options: dict) -> None:
    """Decode with K/V at options' kv_dtype against the exact cache, one model, rounds alternating."""
    from engine.engine import Engine
    from kvtui.bench.decode_precision import format_precision, measure_precision

    need = batch * (max(contexts) + steps * (rounds + 1) + 16)
    overrides = {"prefix_cache": False, "max_num_seqs": batch, "num_blocks": -(-need // 16) + batch + 8}
    quantized = load_engine(model, engine_config({**overrides, "block_size": 16}, **options))
    exact_config = engine_config({**overrides, "block_size": 16}, **{**options, "kv_dtype": None})
    exact = Engine(quantized.model, quantized.tokenizer, exact_config, quantized.shape.name)
    engines = {quantized.shape.dtype: exact, quantized.config.kv_dtype: quantized}
    click.echo(
        f"decode on {quantized.shape.name} ({quantized.shape.dtype}, {quantized.kv.kv.device})", err=True
    )
    click.echo(quantized.runner.plan.describe(), err=True)
    rows = measure_precision(engines, contexts, batch, steps, rounds, progress=_say)
    click.echo(format_precision(rows, list(engines)))


ENGINE_BENCHES = [long_bench, overhead_bench, mixed_bench, prefix_bench, decode_bench]
