"""Commands that read traces and need no torch: `kvtui schema` (the trace format) and `kvtui stats` (hit rates,
latency percentiles and miss causes of a trace file)."""

from __future__ import annotations

import click


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
    """Hit rates and TTFT / TPOT / ITL percentiles (p50/p95/p99) per workload phase of a TRACE_FILE (and hit
    tokens by tier with the bytes loaded back, for a trace with a host tier).

    A bad line stops the summary there (a warning names it); everything before it is counted.
    """
    import json

    from engine.trace.reader import read_trace, skipped_warnings
    from engine.trace.stats import format_stats, format_tiers, stats_json, summarize, tier_totals

    try:
        # the reader replay uses, and its warnings
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
    for text in skipped_warnings(trace, trace_file):
        click.echo(f"warning: {text}", err=True)
    summary = summarize(trace.header, trace.events)
    workers = totals = None
    # recorded by `kvtui attach -o`: one summary per worker, totals from the fleet (no requests: null)
    if trace.header.get("kind") == "attach":
        from kvtui.state.fleet import replay_fleet
        from kvtui.state.fleet_stats import attach_totals, format_workers, workers_summary

        fleet = replay_fleet(trace.header, trace.events)
        workers, totals = workers_summary(fleet), attach_totals(fleet)
    # a cause for every missed prompt token (kvtui/whatif/causes.py), where the trace recorded the matching
    from kvtui.commands.stats_misses import misses_json, misses_text
    from kvtui.whatif.causes import ledger_from_trace

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
        tiers = tier_totals(trace.events)
        if tiers is not None:
            click.echo(format_tiers(tiers))
        if ledger is not None:
            click.echo(misses_text(ledger))


COMMANDS = [schema, stats]
