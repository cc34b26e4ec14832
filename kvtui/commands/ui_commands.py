"""UI commands: `kvtui live` (the default) and `kvtui replay TRACE`."""

from __future__ import annotations

import sys

import click

from engine.trace import read_trace


@click.command()
@click.option("--model", default="smollm2", show_default=True,
              help="'smollm2' (embedded), a local transformers directory, a hub id or a .gguf file")
@click.option("--device", default="auto", show_default=True, help="auto | cpu | cuda")
@click.option("--dtype", default=None, help="float32 | bfloat16 | float16 (default: the engine's choice)")
@click.option("--block-size", type=int, default=16, show_default=True, help="tokens per KV block")
@click.option("--num-blocks", type=int, default=None, help="physical blocks in the pool (default: engine's)")
@click.option("--max-tokens", type=int, default=64, show_default=True, help="tokens to generate per prompt")
@click.option("--save-trace", type=click.Path(dir_okay=False), default=None,
              help="also write everything the UI sees to this trace file")
def live(model, device, dtype, block_size, num_blocks, max_tokens, save_trace):
    """Open the live UI: type prompts, watch the cache, edit tokens."""
    from kvtui.app import KvtuiApp
    from kvtui.feed import EngineWorker, EventFeed

    feed = EventFeed()
    worker = EngineWorker(feed, model, {"device": device, "dtype": dtype, "block_size": block_size,
                                        "num_blocks": num_blocks}, save_trace=save_trace)
    app = KvtuiApp(source=model, live=True, feed=feed, controller=worker, max_tokens=max_tokens)
    worker.start()
    app.run()


@click.command()
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@click.option("--check", is_flag=True, help="only validate the trace and print a summary (no UI)")
def replay(trace, check):
    """Replay a recorded trace: play, step, seek and inspect every view."""
    from kvtui.timeline import Timeline

    parsed = read_trace(trace)
    notices = []
    if parsed.error is not None:
        where = f"{trace}, line {parsed.error.line}"
        if not parsed.header or (not parsed.events and check):
            raise click.ClickException(f"{where}: {parsed.error.message}")
        message = (f"{where}: {parsed.error.message} - showing the {len(parsed.events)} events before it")
        click.echo(f"warning: {message}", err=True)
        notices.append(("error", message))
    if parsed.truncated_tail:
        notices.append(("warning", f"{trace}: the last line is incomplete (the writer stopped mid-line); ignored"))
    if check:
        click.echo(f"{trace}: {len(parsed.events)} events, {parsed.header.get('num_blocks')} blocks of "
                   f"{parsed.header.get('block_size')} tokens" + (" (truncated last line ignored)"
                                                                   if parsed.truncated_tail else ""))
        if parsed.error is not None:
            sys.exit(1)
        return
    from kvtui.app import KvtuiApp

    app = KvtuiApp(Timeline(parsed.header, parsed.events), source=trace, notices=notices)
    app.run()


COMMANDS = [live, replay]
