"""`kvtui attach SOURCE...`: watch the KV caches of running vLLM / SGLang servers through their KV events."""

from __future__ import annotations

import time

import click

from kvtui.commands.output_path import output_file

ATTACH_HELP = """Attach to vLLM / SGLang servers that publish KV-cache events over ZeroMQ and watch their fleet.

\b
A SOURCE is a server's event endpoint, with optional comma-separated options:
  tcp://127.0.0.1:5557
  "tcp://10.0.0.5:5557,replay=tcp://10.0.0.5:5558,name=gpu-a,metrics=http://10.0.0.5:8000/metrics"
Options: replay= (the server's replay endpoint: batches missed at start or in a gap are fetched from it),
name=, metrics= (its Prometheus /metrics page), topic=, blocks= (GPU blocks per worker, when /metrics
cannot tell).

\b
Start the servers with events on:
  vllm serve MODEL --kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq",
      "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558", "topic": "kv-events"}'
  python -m sglang.launch_server --model-path MODEL --kv-events-config '{"publisher": "zmq",
      "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558", "topic": "kv-events"}'

\b
Examples:
  kvtui attach "tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558" --topic kv-events
  kvtui attach tcp://10.0.0.5:5557 tcp://10.0.0.6:5557 --metrics http://10.0.0.5:8000/metrics
  kvtui attach tcp://127.0.0.1:5557 --dp-size 4          ranks 0-3 on ports 5557-5560
  kvtui attach --bind tcp://127.0.0.1:5557               servers connect to us (their endpoint: ours)
  kvtui attach tcp://127.0.0.1:5557 --headless --duration 30 -o fleet.jsonl
  kvtui replay fleet.jsonl                               the same views, from the recording
  kvtui attach tcp://127.0.0.1:5557 --requests requests.jsonl    tab 4: kvtui proxy's requests as lanes

A source that sends nothing for 5 s is said, with what it most likely means (nothing at that address, or a
server there that publishes no events the topic matches); the UI's status line keeps the hint.

What an attached engine publishes is a hash space: blocks by hash per worker, the chain of parent hashes and
the token ids of each block. It has no physical block ids, ref counts, locks or requests; the views say so.
"""


@click.command(help=ATTACH_HELP, short_help="Watch vLLM / SGLang servers' KV caches through their KV events.")
@click.argument("sources", nargs=-1, required=True)
@click.option("--topic", default="", help='Topic to subscribe to (the server\'s "topic"; default: all).')
@click.option(
    "--bind",
    is_flag=True,
    help="Listen on each SOURCE address for servers that connect to it "
    "(a server given a non-wildcard endpoint connects instead of binding). "
    "Servers are told apart by host and topic (ZeroMQ names only the "
    "peer's IP): give servers on one host distinct topics.",
)
@click.option(
    "--dp-size",
    default=1,
    show_default=True,
    help="Data-parallel ranks per server: rank r publishes on port PORT+r (and replays on REPLAY+r).",
)
@click.option(
    "--metrics",
    "metrics_url",
    default=None,
    help="Prometheus /metrics URL for every SOURCE (metrics= on a SOURCE overrides it).",
)
@click.option(
    "--tokenizer",
    default=None,
    help="Tokenizer directory or hub id: show token ids as text and "
    "explain text prompts (loads transformers' AutoTokenizer).",
)
@click.option(
    "-o",
    "--out",
    "out",
    type=click.Path(dir_okay=False),
    default=None,
    callback=output_file,
    help="Record the normalised event stream to this trace (kvtui replay / stats read it).",
)
@click.option(
    "--headless",
    is_flag=True,
    help="No UI: receive (and record), then print a summary. A source silent for 5 s is warned about; when "
    "nothing arrived from any source (no event, no replayed batch), it ends with that reason and exit status 1.",
)
@click.option(
    "--duration",
    type=float,
    default=None,
    help="Seconds to attach for (headless: until Ctrl-C when not given).",
)
@click.option(
    "--explain",
    "explain",
    multiple=True,
    help="Headless: at the end, explain this prompt against "
    "every worker (token ids '1 2 3', or text with "
    "--tokenizer; '[salt=S] [lora=L] [group=G] | PROMPT').",
)
@click.option(
    "--replay-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=2.0,
    show_default=True,
    help="Seconds to wait for a replay answer.",
)
@click.option(
    "--requests",
    "requests_log",
    type=click.Path(dir_okay=False),
    default=None,
    help="kvtui proxy's request log: tab 4 shows each request, vLLM's cached tokens beside kvtui's prediction.",
)
def attach(
    sources,
    topic,
    bind,
    dp_size,
    metrics_url,
    tokenizer,
    out,
    headless,
    duration,
    explain,
    replay_timeout,
    requests_log,
):
    from engine.trace import TraceSink, TraceWriter
    from kvtui.sources.endpoints import SourceError, parse_sources

    if metrics_url is not None and not metrics_url.startswith(("http://", "https://")):
        raise click.UsageError(f"--metrics {metrics_url!r}: give an http(s):// URL of a /metrics page")
    if duration is not None and duration <= 0:
        raise click.UsageError(f"--duration must be positive (got {duration:g})")
    try:
        parsed = parse_sources(list(sources), topic=topic, metrics=metrics_url, bind=bind, dp_size=dp_size)
    except SourceError as exc:
        raise click.UsageError(str(exc)) from None
    tok = _load_tokenizer(tokenizer) if tokenizer else None
    queries = [_query(text, tok) for text in explain]
    try:
        import zmq  # noqa: F401
    except ImportError:
        raise click.ClickException("kvtui attach needs pyzmq: pip install pyzmq msgspec") from None
    from kvtui.sources.attach import attach_header

    header = attach_header(parsed, tokenizer)
    if headless:
        from kvtui.sources.attach import Attacher, anchored

        sink = TraceSink()
        if out:
            sink.add_writer(TraceWriter(out))
        sink.set_header(anchored(header, sink))
        attacher = Attacher(parsed, sink, tokenizer=tok, replay_timeout=replay_timeout)
        seconds = _headless(attacher, sink, duration, queries)
        sink.close()
        if attacher.failed:
            raise click.ClickException(attacher.failed)
        silent = attacher.silent_sources()
        # nothing at all arrived: a wrong address or topic, events off, or an idle server, never a success
        if len(silent) == len(parsed):
            if out:
                click.echo(f"wrote {out} (no events)", err=True)
            raise click.ClickException("; ".join(attacher.silence_text(s, seconds) for s in silent))
    else:
        _ui(parsed, header, out, tokenizer, tok, duration, replay_timeout, requests_log)
    if out:
        click.echo(f"wrote {out}", err=True)


def _load_tokenizer(name: str):
    from kvtui.sources.attach import load_tokenizer

    try:
        return load_tokenizer(name)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def _query(text: str, tokenizer):
    from kvtui.state.fleet_explain import QueryError, parse_query

    try:
        return text, *parse_query(text, tokenizer)
    except QueryError as exc:
        raise click.UsageError(f"--explain {text!r}: {exc}") from None


def _headless(attacher, sink, duration, queries) -> float:
    """Receive until the duration is over (or Ctrl-C), then print the summary: the seconds it received for."""
    from kvtui.state.fleet import FleetState
    from kvtui.state.fleet_hybrid import explain_any
    from kvtui.state.fleet_stats import workers_summary

    fleet = FleetState(sink.header)
    sink.batch_listeners.append(fleet.apply_all)
    started = time.monotonic()
    attacher.start()
    try:
        while duration is None or time.monotonic() - started < duration:
            if attacher.failed:
                break
            time.sleep(0.1)
            while not attacher.notices.empty():
                severity, text = attacher.notices.get()
                click.echo(f"{severity}: {text}", err=True)
    except KeyboardInterrupt:
        pass
    attacher.stop()
    seconds = time.monotonic() - started
    c = attacher.counters
    click.echo(
        f"attached {seconds:.1f}s: {c.messages} live messages, {c.replayed} replayed, "
        f"{c.events} events, "
        f"{c.blocks} block hashes; {c.gaps} gaps ({c.lost} batches lost), {c.restarts} restarts, "
        f"{c.malformed} malformed"
    )
    for w in workers_summary(fleet):
        click.echo(
            f"  {w['worker']:<24} {w['source']:<24} rank {w['rank']!s:<4} resident {w['resident_blocks']:>7} "
            f"stored {w['blocks_stored']:>8} removed {w['blocks_removed']:>8} gaps {w['gaps']} "
            f"malformed {w['malformed']}"
        )
    for text, ids, options in queries:
        click.echo(f"explain {text!r} ({len(ids)} tokens):")
        for result in explain_any(fleet, ids, **options):
            click.echo(f"  {result['message']}")
    return seconds


def _ui(sources, header, out, tokenizer_name, tokenizer, duration, replay_timeout, requests_log=None) -> None:
    """The fleet views; a collector process receives, folds and records (kvtui/sources/collector.py)."""
    from kvtui.app.fleet_app import FleetApp
    from kvtui.sources.collector import STOP_TIMEOUT, CollectorClient

    collector = CollectorClient(
        sources, header, out=out, tokenizer=tokenizer_name, replay_timeout=replay_timeout
    )
    names = ", ".join(s.name for s in sources)
    app = FleetApp(
        source=names, collector=collector, tokenizer=tokenizer, duration=duration, requests_log=requests_log
    )
    try:
        app.run()
    finally:
        # after the message it is folding; the -o trace is closed when this returns
        collector.stop()
    if collector.dead:
        click.echo(f"warning: {collector.dead}", err=True)
    elif out and not collector.stopped:
        click.echo(
            f"warning: the collector did not stop within {STOP_TIMEOUT:g} s; {out} may end mid-line "
            "(kvtui replay reads it up to there)",
            err=True,
        )


def replay_attach(trace: str, header: dict) -> None:
    """`kvtui replay` of an attach trace: the fleet views, at the end of the recording (g: go to a %)."""
    from engine.trace.opening import problem_line, skipped_warnings
    from kvtui.app.fleet_app import FleetApp
    from kvtui.app.loader import load_trace

    loaded = load_trace(trace)
    if loaded.error is not None:
        click.echo(
            f"{problem_line(trace, loaded.error)} (showing the {len(loaded.events)} events before it)",
            err=True,
        )
    for text in skipped_warnings(loaded, trace):
        click.echo(f"warning: {text}", err=True)
    FleetApp(source=trace, header=header, events=loaded.events).run()


@click.command("attach", short_help="Sustained ZeroMQ attach ingest with the fleet UI open.")
@click.option(
    "--rate",
    type=float,
    default=120_000,
    show_default=True,
    help="Block events per second the publisher offers.",
)
@click.option("--seconds", type=float, default=10.0, show_default=True, help="How long to measure.")
@click.option(
    "--pool",
    type=int,
    default=20_000,
    show_default=True,
    help="Blocks the publisher keeps resident (then one removal per store).",
)
@click.option(
    "--run",
    "run_blocks",
    type=int,
    default=1,
    show_default=True,
    help="Blocks per BlockStored event: 1 as SGLang publishes, more as vLLM stores a prompt's run.",
)
def attach_bench(rate, seconds, pool, run_blocks):
    """Sustained ingest of KV events from a publisher process over loopback ZeroMQ with the fleet UI open
    (headless, 200x60, 30 frames/s): received and applied block events per second, frame times (target
    <= 33 ms), and a same-run baseline (decode + fold, one thread, no sockets, no UI)."""
    from kvtui.bench.attach import format_result, run

    if rate <= 0 or seconds <= 0 or pool <= 0 or run_blocks <= 0:
        raise click.UsageError("--rate, --seconds, --pool and --run must be positive")
    click.echo(format_result(run(rate, seconds, pool, run_blocks)))


COMMANDS = [attach]
