"""`kvtui export TRACE --perfetto OUT.pftrace`: a recorded trace as a Perfetto timeline (torch-free)."""

from __future__ import annotations

import click

from kvtui.commands.output_path import output_file


@click.command()
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--perfetto",
    "perfetto_out",
    required=True,
    type=click.Path(dir_okay=False),
    callback=output_file,
    help="Write a Perfetto protobuf trace here (open it at https://ui.perfetto.dev).",
)
def export(trace, perfetto_out):
    """Export TRACE to another tool's format.

    \b
    --perfetto OUT.pftrace: one track per request (queued, prefill chunks, decode steps, edits,
    preemptions, misses with their reason, invalidations), counter tracks (free / used / cached blocks,
    the three hit rates, tokens per step) and an evictions track. Open it at https://ui.perfetto.dev
    ("Open trace file"), or with Perfetto's trace_processor.
    """
    from engine.trace.opening import TraceUnusable, open_trace, skipped_warnings
    from kvtui.export.perfetto import build_perfetto

    try:
        loaded = open_trace(trace)
    except TraceUnusable as exc:
        raise click.ClickException(str(exc)) from None
    for text in skipped_warnings(loaded, trace):
        click.echo(f"warning: {text}", err=True)
    data = build_perfetto(loaded.header, loaded.events, title=f"kvtui {trace.rsplit('/', 1)[-1]}")
    try:
        with open(perfetto_out, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise click.ClickException(f"cannot write {perfetto_out}: {exc.strerror}") from None
    click.echo(
        f"wrote {perfetto_out} ({len(data):,} bytes, {len(loaded.events):,} events); open it at "
        f"https://ui.perfetto.dev",
        err=True,
    )


COMMANDS = [export]
