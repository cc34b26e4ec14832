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
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object instead of the table: the same figures, rates in 0..1, seconds.",
)
def stats(trace, as_json):
    """Hit rates and TTFT / TPOT / ITL percentiles (p50/p95/p99) per workload phase of a TRACE (and hit
    tokens by tier with the bytes loaded back, for a trace with a host tier), then every prompt token as hit
    or missed, the misses by cause.

    A bad line is refused with its line number; a last line cut mid-line is ignored (a warning says so).
    """
    import json

    from engine.trace.opening import TraceUnusable, open_trace, skipped_warnings
    from engine.trace.stats import format_stats, format_tiers, stats_json, summarize, tier_totals

    trace_file = trace
    try:
        trace = open_trace(trace_file)
    except TraceUnusable as exc:
        raise click.ClickException(str(exc)) from None
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
        out = stats_json(trace_file, trace.header, trace.events, summary)
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
