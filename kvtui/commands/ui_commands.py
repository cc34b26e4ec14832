"""UI commands: `kvtui live` (the default) and `kvtui replay TRACE`."""

from __future__ import annotations

import os
import sys

import click

from kvtui.commands.engine_options import engine_config, engine_options
from kvtui.commands.output_path import output_file
from kvtui.commands.publish_option import PublishingFeed, open_publisher, publish_option


def _check_model_path(model: str) -> None:
    """A model named as a file or directory that does not exist: say so now, not after the UI opened."""
    looks_local = model.startswith((".", "/", "~")) or model.endswith(".gguf")
    if looks_local and not os.path.exists(os.path.expanduser(model)):
        raise click.ClickException(
            f"model {model!r}: no such file or directory (give 'smollm2', a local "
            f"transformers directory, a .gguf file or a hub id)"
        )
    path = os.path.expanduser(model)
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json")):
        raise click.ClickException(
            f"model {model!r} is a directory without config.json: not a transformers model"
        )


@click.command()
@engine_options
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Tokens to generate per prompt.",
)
@click.option(
    "--save-trace",
    type=click.Path(dir_okay=False),
    default=None,
    callback=output_file,
    help="Also write everything the UI sees to this trace file.",
)
@publish_option
def live(model, max_tokens, save_trace, publish, **options):
    """Open the live UI: type prompts, watch the cache, edit tokens."""
    from kvtui.app import KvtuiApp
    from kvtui.app.feed import EngineWorker, EventFeed

    _check_model_path(model)
    config = engine_config(**options)
    publisher = open_publisher(publish) if publish else None
    feed = EventFeed() if publisher is None else PublishingFeed(publisher)
    worker = EngineWorker(feed, model, config, save_trace=save_trace)
    app = KvtuiApp(source=model, live=True, feed=feed, controller=worker, max_tokens=max_tokens)
    worker.start()
    try:
        app.run()
    finally:
        # after the app is gone too (it stops it on unmount): the saved trace is closed whole
        worker.stop()
        if publisher is not None:
            publisher.close()
    # a crash in the UI (Textual prints its traceback) is not a success
    sys.exit(app.return_code or 0)


@click.command()
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@click.option("--check", is_flag=True, help="only validate the trace and print a summary (no UI)")
@click.option(
    "--from-start",
    is_flag=True,
    help="open at the first event (default: the end of the trace, or "
    "the busiest step when the end holds no blocks)",
)
def replay(trace, check, from_start):
    """Replay a recorded trace: play, step, seek and inspect every view."""
    from engine.trace.opening import problem_line, skipped_warnings
    from kvtui.app.loader import load_trace, read_header

    header, error = read_header(trace)
    if header is None:
        raise click.ClickException(problem_line(trace, error))
    if check:
        from kvtui.app.loading import fold
        from kvtui.state.timeline import Timeline

        # the replay's own path: reader, then reducer
        timeline = Timeline(header)
        loaded = load_trace(trace, on_batch=lambda batch: fold(timeline, batch))
        if loaded.error is not None:
            click.echo(f"Error: {problem_line(trace, loaded.error)}", err=True)
        for text in skipped_warnings(loaded, trace):
            click.echo(f"warning: {text}", err=True)
        what = f"{header.get('num_blocks')} blocks of {header.get('block_size')} tokens"
        if header.get("kind") == "attach":
            # an attached fleet: its workers, pool and block size come from the events
            from kvtui.state.fleet import replay_fleet
            from kvtui.state.fleet_stats import check_line

            what = check_line(replay_fleet(header, loaded.events))
        click.echo(f"{trace}: {len(loaded.events)} events, {what}")
        if loaded.error is not None:
            sys.exit(1)
        return
    # recorded by `kvtui attach -o`: the fleet views
    if header.get("kind") == "attach":
        from kvtui.commands.attach_commands import replay_attach

        return replay_attach(trace, header)
    from kvtui.app import KvtuiApp

    app = KvtuiApp(source=trace, trace_path=trace, open_interesting=not from_start)
    app.run()
    sys.exit(app.return_code or 0)


COMMANDS = [live, replay]
