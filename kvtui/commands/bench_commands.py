"""`kvtui bench`: the engine against transformers' generate (the default), the cache, and the UI's frame times."""

from __future__ import annotations

import functools
import time

import click

from kvtui.bench.vllm_peer import vllm_bench
from kvtui.commands.attach_commands import attach_bench
from kvtui.commands.bench_engine_commands import ENGINE_BENCHES
from kvtui.commands.bench_tier_commands import tiers_bench
from kvtui.commands.engine_options import (
    MAX_NUM_BLOCKS,
    check_device,
    engine_config,
    engine_options,
    load_engine,
)


def _say(msg: str) -> None:
    click.echo(f"  {msg}", err=True)


@click.group(invoke_without_command=True, short_help="Engine vs generate, cache, UI benchmarks.")
@engine_options
@click.option(
    "--prompt-tokens",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Prompt length of each request.",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Tokens generated per request.",
)
@click.option(
    "--concurrent",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Requests in the concurrent scenario.",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs of each scenario (best is reported).",
)
@click.option(
    "--cache",
    "cache_bench",
    is_flag=True,
    help="Instead: warm vs cold TTFT with a 90%-shared prefix, and re-prefill after edits.",
)
@click.pass_context
def bench(ctx, model, prompt_tokens, max_tokens, concurrent, repeats, cache_bench, **options):
    """Benchmarks. With no subcommand: our engine against transformers' generate on the same model, in the
    same run (one stream, then N concurrent prompts).

    With --cache: the prefix cache's gain (warm vs cold TTFT) and an edit's cost (re-prefill vs full prefill).

    \b
    Examples:
      kvtui bench                          engine vs transformers' generate, embedded model
      kvtui bench --prompt-tokens 16 --max-tokens 4 --concurrent 2     a quick one
      kvtui bench --cache                  warm vs cold TTFT; re-prefill after edits
      kvtui bench ui                       replay ingest, seek and frame times on a recorded trace
      kvtui bench frames --trace fixtures/traces/concurrent8.jsonl
      kvtui bench live --seconds 10        frame times while the real engine decodes
      kvtui bench decode --batches 1,8     decode step time by batch size
      kvtui bench vllm --url http://127.0.0.1:8000    our engine beside a running vLLM
      kvtui bench proxy                    the latency kvtui proxy adds
    """
    if ctx.invoked_subcommand is not None:
        typed = [
            param.opts[0]
            for param in ctx.command.params
            if ctx.get_parameter_source(param.name) is click.core.ParameterSource.COMMANDLINE
        ]
        if typed:
            sub = ctx.invoked_subcommand
            raise click.UsageError(
                f"options before `{sub}` are the engine bench's ({', '.join(typed)}); put "
                f"`{sub}`'s own options after its name (see `kvtui bench {sub} --help`)"
            )
        return
    from kvtui.bench.engine_vs_generate import format_table, run_bench

    # the prefix cache off, except for --cache: a repeated bench prompt must not turn into cache hits
    engine = load_engine(model, engine_config({"prefix_cache": cache_bench}, **options))
    if cache_bench:
        from kvtui.bench.cache import edit_reprefill, format_cache_bench, warm_vs_cold

        tokens = max(prompt_tokens, 64)
        click.echo(
            format_cache_bench(
                warm_vs_cold(engine, tokens, progress=_say),
                edit_reprefill(engine, tokens, repeats=max(repeats, 3), progress=_say),
            )
        )
        return
    click.echo(
        f"bench on {engine.shape.name} ({engine.shape.dtype}, {engine.kv.kv.device}): "
        f"{prompt_tokens}-token prompts, {max_tokens} new tokens, {concurrent} concurrent",
        err=True,
    )
    rows = run_bench(engine, prompt_tokens, max_tokens, concurrent, repeats, progress=_say)
    click.echo(format_table(rows))


# kvtui.bench.frames: 30 live frames of 2000 new events each
LIVE_FRAME_EVENTS = 2000 * 30


def trace_options(default_events: int):
    """Where a UI bench gets its trace: a fresh recording of our engine on a tiny random model, or a file."""

    def decorate(func):
        @click.option(
            "--events",
            type=click.IntRange(min=1),
            default=default_events,
            show_default=True,
            help="Events to record: a run of our engine on a tiny randomly initialised model (no "
            "download, about 20-30k events/s on a CPU).",
        )
        @click.option(
            "--trace",
            "trace_path",
            type=click.Path(exists=True, dir_okay=False),
            default=None,
            help="Measure this trace file instead of recording one (e.g. fixtures/traces/chat.jsonl).",
        )
        @click.option(
            "--save",
            type=click.Path(dir_okay=False),
            default=None,
            help="Also write the recorded trace here, to measure it again later with --trace.",
        )
        @functools.wraps(func)
        def wrapper(events, trace_path, save, **kwargs):
            return func(_load_or_record(events, trace_path, save), **kwargs)

        return wrapper

    return decorate


def _load_or_record(events: int, trace_path: str | None, save: str | None) -> tuple[dict, list[dict]]:
    from kvtui.bench.ui import read_trace_file, record_trace, write_trace_file

    context = click.get_current_context()
    if trace_path is not None:
        if context.get_parameter_source("events") is click.core.ParameterSource.COMMANDLINE or save:
            raise click.UsageError(
                "--events and --save describe a recording; --trace measures a file as it is"
            )
        try:
            header, recorded = read_trace_file(trace_path)
        # engine.trace.TraceError: says the line and what is wrong
        except ValueError as exc:
            raise click.ClickException(f"{trace_path}: {exc}") from None
        click.echo(f"trace {trace_path}: {len(recorded):,} events, {header['num_blocks']} blocks", err=True)
        if len(recorded) < LIVE_FRAME_EVENTS:
            click.echo(
                f"note: the live frame fed 2000 events per frame needs {LIVE_FRAME_EVENTS:,} events; with "
                f"fewer, its later frames are empty and its figure means little",
                err=True,
            )
        return header, recorded
    click.echo(f"recording {events:,} events of our engine on a tiny random model", err=True)
    t0 = time.perf_counter()
    header, recorded = record_trace(events, progress=_say)
    click.echo(
        f"recorded trace: {len(recorded):,} events, {header['num_blocks']} blocks "
        f"(in {time.perf_counter() - t0:.1f} s)",
        err=True,
    )
    if save:
        write_trace_file(save, header, recorded)
        click.echo(f"wrote {save}", err=True)
    return header, recorded


@bench.command("ui", short_help="Replay ingest, seek and frame times on a big recorded trace.")
@trace_options(default_events=300_000)
@click.option("--parse", is_flag=True, help="Also measure parsing + validating a trace file.")
@click.option(
    "--frames/--no-frames",
    default=True,
    show_default=True,
    help="Also time every view's frame (`kvtui bench frames` measures them alone).",
)
def ui_bench(trace, parse, frames):
    """Replay ingest (reducer + keyframes), seek at random points, and every view's frame time, on a big trace.

    No model is downloaded: the trace is recorded from our own engine on a tiny randomly initialised model,
    or read from a file with --trace.
    """
    from kvtui.bench.ui import run

    run(*trace, parse=parse, frames=frames, echo=click.echo)


@bench.command("frames", short_help="Each view's frame time, and a headless live frame.")
@trace_options(default_events=100_000)
def frames_bench(trace):
    """Time to render each view at 200x60 (no app), and a headless live frame fed 50 or 2000 events."""
    from kvtui.bench.frames import bench_frames, format_ms

    for name, ms in bench_frames(*trace).items():
        click.echo(f"render one frame, {name}: {format_ms(ms)}")


def _size(ctx, param, value: str) -> tuple[int, int]:
    try:
        width, height = (int(x) for x in value.lower().split("x"))
    except ValueError:
        raise click.BadParameter(f"{value!r}: give columns x rows, e.g. 200x60") from None
    # the smallest terminal the app lays out in
    if width < 40 or height < 12:
        raise click.BadParameter(f"{value!r}: give at least 40x12 (columns x rows)")
    return width, height


@bench.command("live", short_help="Frame times of the live app while the real engine decodes.")
@click.option(
    "--model",
    "-m",
    default="smollm2",
    show_default=True,
    help="'smollm2' (embedded), a local transformers directory, a .gguf file, or a hub id.",
)
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    callback=check_device,
    metavar="auto|cpu|cuda[:N]",
    help="Where the model runs: auto, cpu, cuda or cuda:N.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=20.0,
    show_default=True,
    help="How long to measure.",
)
@click.option("--size", default="200x60", show_default=True, callback=_size, help="Terminal size, COLSxROWS.")
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="Tokens generated per prompt.",
)
@click.option(
    "--num-blocks",
    type=click.IntRange(1, MAX_NUM_BLOCKS),
    default=256,
    show_default=True,
    help="Blocks in the pool.",
)
def live_bench(model, device, seconds, size, max_tokens, num_blocks):
    """Frame times of the live app (headless) while the real engine decodes four prompts flat out.

    Each frame is timed as tick (drain, fold, refresh) + screen update; tabs are cycled once a second, and the
    event-loop lag (what a key press waits for) is measured too. Target: <= 33 ms per frame.
    """
    from kvtui.bench.live import format_result, run

    click.echo(format_result(run(model, device, seconds, size, max_tokens, num_blocks)))


@bench.command(
    "whatif", short_help="The one-pass LRU curve vs kvcache-simulator on a Mooncake-shaped workload."
)
@click.option(
    "--workload",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="A Mooncake JSONL (default: kvtui.whatif.synth's 12k-request workload, generated).",
)
@click.option(
    "--capacities",
    type=click.IntRange(min=2),
    default=50,
    show_default=True,
    help="LRU capacities, log-spaced in blocks.",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Rounds; each runs both tools back to back, medians reported.",
)
@click.option(
    "--kvcache-simulator",
    "kvsim",
    default=None,
    help="The kvcache-simulator command (default: on PATH; without it, a plain LRU simulation).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the generated workload.")
@click.option(
    "--check",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Also check the curve against plain LRU simulations at this many capacities.",
)
@click.option("--optimal", is_flag=True, help="Also Belady's bound at the checked capacities.")
@click.option(
    "--scale",
    is_flag=True,
    help="Instead: `kvtui whatif` itself at production scale (one-pass, simulated, --jobs), against targets.",
)
@click.option(
    "--base", type=click.Path(exists=True, file_okay=False), help="--scale: another checkout, alternated."
)
@click.option("--million", is_flag=True, help="--scale: also the streamed one-pass of 1,000,000 requests.")
@click.option(
    "--jobs", type=click.IntRange(min=1), default=2, show_default=True, help="--scale: the parallel sweep."
)
def whatif_bench(workload, capacities, repeats, kvsim, seed, check, optimal, scale, base, million, jobs):
    """The whole LRU hit-rate curve in one pass against kvcache-simulator's LRU sweep (PyPI, C++ backend) at
    the same capacities on the same Mooncake-format workload, timed in the same run, with agreement figures.
    With --scale: the what-if command at production scale, each case timed whole with its peak memory."""
    if scale:
        from kvtui.bench.whatif_scale import run_scale

        run_scale(workload, repeats, base, million, jobs, echo=click.echo)
        return
    from kvtui.bench.whatif import read_mooncake, run

    if workload is not None:
        try:
            read_mooncake(workload)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
    run(workload, capacities, repeats, kvsim, seed, check, optimal, echo=click.echo)


# long, overhead, mixed, prefix (kvtui/commands/bench_engine_commands.py)
for _command in ENGINE_BENCHES:
    bench.add_command(_command)
# kvtui/commands/attach_commands.py
bench.add_command(attach_bench)
# kvtui/commands/bench_tier_commands.py: the host tier against recomputing
bench.add_command(tiers_bench)
# kvtui/bench/vllm_peer.py: our engine against a running vLLM server
bench.add_command(vllm_bench)


@bench.command("proxy", short_help="The latency kvtui proxy adds to a request (p50, against a direct one).")
@click.option(
    "--requests",
    type=click.IntRange(min=1),
    default=300,
    show_default=True,
    help="Requests each way (direct, proxied).",
)
def proxy_bench(requests):
    """The p50 latency kvtui proxy adds: a loopback upstream that answers at once, the same request sent direct
    and through the proxy, interleaved. Run it with nothing else busy (the load average is printed)."""
    from kvtui.bench.proxy_latency import format_result, measure

    click.echo(format_result(measure(requests)))


COMMANDS = [bench]
