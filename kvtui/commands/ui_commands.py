"""UI commands: `kvtui live` (the default) and `kvtui replay TRACE`."""

from __future__ import annotations

import os
import sys

import click


def _engine_config(**options):
    """The engine configuration live mode runs with; a bad value is a usage error before the UI opens."""
    from engine.engine import EngineConfig

    values = {k: v for k, v in options.items() if v is not None}
    try:
        return EngineConfig(**values)
    except (TypeError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None


def _check_model_path(model: str) -> None:
    """A model named as a file or directory that does not exist: say so now, not after the UI opened."""
    looks_local = model.startswith((".", "/", "~")) or model.endswith(".gguf")
    if looks_local and not os.path.exists(os.path.expanduser(model)):
        raise click.ClickException(f"model {model!r}: no such file or directory (give 'smollm2', a local "
                                   f"transformers directory, a .gguf file or a hub id)")


@click.command()
@click.option("--model", "-m", default="smollm2", show_default=True,
              help="'smollm2' (embedded), a local transformers directory, a hub id or a .gguf file")
@click.option("--device", default="auto", show_default=True, help="auto | cpu | cuda[:n]")
@click.option("--dtype", default="float32", show_default=True, help="float32 | bfloat16 | float16")
@click.option("--block-size", type=int, default=16, show_default=True, help="tokens per KV block")
@click.option("--num-blocks", type=int, default=None, help="physical blocks in the pool [default: 256 MiB of KV]")
@click.option("--max-batched-tokens", type=int, default=512, show_default=True,
              help="token budget per step; longer prompts are prefilled in chunks")
@click.option("--prefix-cache/--no-prefix-cache", default=True, show_default=True,
              help="share cached prefixes between requests (radix tree)")
@click.option("--eviction", type=click.Choice(["lru", "lfu", "cost"]), default="lru", show_default=True,
              help="which cached block goes first when the pool is full")
@click.option("--max-tokens", type=int, default=64, show_default=True, help="tokens to generate per prompt")
@click.option("--save-trace", type=click.Path(dir_okay=False), default=None,
              help="also write everything the UI sees to this trace file")
def live(model, device, dtype, block_size, num_blocks, max_batched_tokens, prefix_cache, eviction, max_tokens,
         save_trace):
    """Open the live UI: type prompts, watch the cache, edit tokens."""
    from kvtui.app import KvtuiApp
    from kvtui.feed import EngineWorker, EventFeed

    if max_tokens < 1:
        raise click.UsageError(f"--max-tokens must be at least 1 (got {max_tokens})")
    _check_model_path(model)
    config = _engine_config(device=device, dtype=dtype, block_size=block_size, num_blocks=num_blocks,
                            max_batched_tokens=max_batched_tokens, prefix_cache=prefix_cache, eviction=eviction)
    feed = EventFeed()
    worker = EngineWorker(feed, model, config, save_trace=save_trace)
    app = KvtuiApp(source=model, live=True, feed=feed, controller=worker, max_tokens=max_tokens)
    worker.start()
    app.run()


@click.command()
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@click.option("--check", is_flag=True, help="only validate the trace and print a summary (no UI)")
@click.option("--from-start", is_flag=True, help="open at the first event (default: the end of the trace, or "
                                                 "the busiest step when the end holds no blocks)")
def replay(trace, check, from_start):
    """Replay a recorded trace: play, step, seek and inspect every view."""
    from kvtui.loader import load_trace, read_header

    header, error = read_header(trace)
    if header is None:
        raise click.ClickException(f"{trace}, line {error.line}: {error.message}")
    if check:
        loaded = load_trace(trace)
        if loaded.error is not None:
            click.echo(f"{trace}, line {loaded.error.line}: {loaded.error.message}", err=True)
        unknown = ", ".join(f"{k} ({n})" for k, n in sorted(loaded.unknown_types.items()))
        click.echo(f"{trace}: {len(loaded.events)} events, {header.get('num_blocks')} blocks of "
                   f"{header.get('block_size')} tokens" + (" (truncated last line ignored)"
                                                            if loaded.truncated_tail else "")
                   + (f"; unknown event types skipped: {unknown}" if unknown else ""))
        if loaded.error is not None:
            sys.exit(1)
        return
    from kvtui.app import KvtuiApp

    KvtuiApp(source=trace, trace_path=trace, open_interesting=not from_start).run()


COMMANDS = [live, replay]
