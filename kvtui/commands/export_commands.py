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
    from kvtui.app.loader import load_trace, skipped_warnings
    from kvtui.export.perfetto import build_perfetto

    loaded = load_trace(trace)
    if loaded.error is not None and not loaded.events:
        raise click.ClickException(f"{trace}, line {loaded.error.line}: {loaded.error.message}")
    if loaded.error is not None:
        click.echo(
            f"warning: {trace}, line {loaded.error.line}: {loaded.error.message}; exporting the "
            f"{len(loaded.events)} events before it",
            err=True,
        )
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
