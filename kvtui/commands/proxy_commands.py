"""`kvtui proxy`: an OpenAI-compatible pass-through in front of vLLM that records each request (and, attached
to the server's KV events, explains each one at its arrival against kvtui's picture of the cache)."""

from __future__ import annotations

import click

PROXY_HELP = """Pass OpenAI requests through to a vLLM server and record each one (kvtui/sources/proxy.py).

\b
  kvtui proxy --upstream http://127.0.0.1:8000 --listen 127.0.0.1:8001 --log requests.jsonl
  kvtui proxy --upstream http://127.0.0.1:8000 --log requests.jsonl \\
      --attach "tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558"
  kvtui whatif requests.jsonl ...        the log is a workload: what if this vLLM had twice the blocks

Clients use the proxy's address instead of the server's; every byte passes unchanged. Per request: the prompt
token ids as vLLM saw them (its /tokenize), the salt, cached_tokens (start vLLM with
--enable-prompt-tokens-details), TTFT and TPOT from the stream, the answer's token ids. With --attach, each
request is explained at its arrival and kvtui's predicted hit tokens are compared with vLLM's cached tokens: a
disagreement means kvtui's picture of the cache is wrong or incomplete. With --attach and --log, the server's
KV-event batches go beside the log (requests.events.jsonl: kvtui/sources/proxy_events.py), and kvtui whatif
replays the log on the server's own steps.
"""


@click.command(
    help=PROXY_HELP, short_help="OpenAI pass-through to vLLM that records (and explains) requests."
)
@click.option("--upstream", required=True, help="The vLLM server: http://HOST:PORT.")
@click.option(
    "--listen",
    default="127.0.0.1:8001",
    show_default=True,
    help="HOST:PORT to listen on (loopback by default; 0.0.0.0 to serve other machines).",
)
@click.option(
    "--log", "log_path", type=click.Path(dir_okay=False), default=None, help="Request log (JSON lines)."
)
@click.option(
    "--attach",
    "attach_sources",
    multiple=True,
    help="A KV-event SOURCE of the server (as kvtui attach takes it): explain each request at its arrival.",
)
@click.option("--topic", default="", help="KV-event topic (with --attach).")
@click.option("--quiet", is_flag=True, help="No line per request on the terminal.")
@click.option(
    "--kv-config",
    help="The served model's config.json or directory: its KV-cache groups (a hybrid model's window and Mamba "
    "layers), written into the log's server settings; with --attach the prediction follows vLLM's hybrid rule.",
)
@click.option(
    "--prefix-match-unit",
    type=click.IntRange(min=1),
    default=None,
    help="The server's prefix_match_unit when it set one: hits only in multiples of it (written into the log's "
    "server settings) [the block size].",
)
def proxy(upstream, listen, log_path, attach_sources, topic, quiet, kv_config, prefix_match_unit):
    import asyncio
    import os

    from kvtui.sources.hybrid_rule import HybridFleet
    from kvtui.sources.proxy import Proxy
    from kvtui.sources.proxy_log import summary_line

    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise click.UsageError(
            f"--listen {listen!r}: give HOST:PORT with a port of 0-65535 (e.g. 127.0.0.1:8001)"
        )
    if log_path and not os.path.isdir(os.path.dirname(os.path.abspath(log_path))):
        raise click.UsageError(
            f"--log {log_path}: the directory {os.path.dirname(log_path)!r} does not exist"
        )
    attacher = explain = locked = events_log = admission = None
    groups = kv_groups(kv_config)
    if attach_sources:
        from engine.trace import TraceSink
        from kvtui.sources.attach import Attacher
        from kvtui.sources.endpoints import SourceError, parse_sources
        from kvtui.state.fleet import FleetState

        try:
            sources = parse_sources(list(attach_sources), topic=topic)
        except SourceError as exc:
            raise click.UsageError(str(exc)) from None
        sink = TraceSink()
        # the hybrid rule where the groups (--kv-config's, or the events') are hybrid, else fleet_explain's
        locked = HybridFleet(FleetState({}), groups, prefix_match_unit)
        sink.batch_listeners.append(locked.fold)
        if log_path:
            from kvtui.sources.proxy_events import EventsLog, events_path

            events_log = EventsLog(events_path(log_path))
            sink.batch_listeners.append(events_log.write)
        from kvtui.sources.proxy_admission import AdmissionWatch

        admission = AdmissionWatch()
        sink.batch_listeners.append(admission.on_batch)
        attacher = Attacher(sources, sink)
        explain = locked.explain
    log = open(log_path, "a", encoding="utf-8") if log_path else None
    try:
        server = Proxy(upstream, host or "127.0.0.1", int(port), log=log, explain=explain)
        server.admission = admission
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if groups:
        server.server_extra["kv_groups"] = [{"kind": g.kind, "window": g.window} for g in groups]
    if prefix_match_unit:
        server.server_extra["prefix_match_unit"] = prefix_match_unit
    if locked is not None:
        locked.in_flight = server.in_flight
    if not quiet:
        server.on_record.append(lambda record: click.echo(summary_line(record)))
    # a client's 502 is said even with --quiet
    server.on_problem.append(lambda text: click.echo(f"kvtui proxy: {text}", err=True))

    async def run():
        try:
            await server.start()
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {listen}: {exc.strerror or exc}") from None
        click.echo(f"kvtui proxy: http://{server.host}:{server.port} -> {upstream}", err=True)
        try:
            _, probe = await asyncio.wait_for(asyncio.open_connection(server.up_host, server.up_port), 3)
            probe.close()
        # the server may come up later: a warning, and each request meanwhile gets a 502 with the reason
        except (OSError, asyncio.TimeoutError) as exc:
            click.echo(
                f"kvtui proxy: warning: nothing answers at {server.upstream} ({os.strerror(exc.errno) if getattr(exc, 'errno', None) else 'no answer'}); "
                "requests get 502 until vLLM is up there",
                err=True,
            )
        await server.serve_forever()

    if attacher is not None:
        attacher.start()
    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    finally:
        if attacher is not None:
            attacher.stop()
        if events_log is not None:
            events_log.close()
        if log is not None:
            log.close()
    s = server.stats
    click.echo(
        f"{s.requests} requests, {s.recorded} recorded"
        + (
            f"; kvtui's prediction agreed with vLLM on {s.agree}, disagreed on {s.disagree}"
            if explain
            else ""
        ),
        err=True,
    )


COMMANDS = [proxy]


def kv_groups(kv_config: str | None) -> list:
    """--kv-config's KV-cache groups when they are hybrid, else []."""
    if not kv_config:
        return []
    from engine.models.kv_budget import ConfigError, load_config
    from kvtui.whatif.hybrid_groups import groups_from_config, is_hybrid

    try:
        groups = groups_from_config(load_config(kv_config)[0])
    except ConfigError as exc:
        raise click.UsageError(f"--kv-config: {exc}") from None
    return groups if is_hybrid(groups) else []
