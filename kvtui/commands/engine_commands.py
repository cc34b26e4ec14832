"""Headless commands that run the engine: generate and record. `kvtui info` is info_commands.py; schema and
stats, which only read traces (no torch), trace_commands.py."""

from __future__ import annotations

import click

from kvtui.commands import compare_commands
from kvtui.commands.engine_options import engine_config, engine_options, load_engine
from kvtui.commands.output_path import output_file
from kvtui.commands.publish_option import open_publisher, publish_option


@click.command()
@click.argument("prompt")
@engine_options
@click.option("--max-tokens", type=click.IntRange(min=1), default=128, show_default=True)
@click.option(
    "--temperature", type=click.FloatRange(min=0), default=0.0, show_default=True, help="0 = greedy."
)
@click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), default=1.0, show_default=True)
@click.option("--top-k", type=click.IntRange(min=0), default=0, show_default=True, help="0 = off.")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=None)
@click.option("--raw", is_flag=True, help="Send the prompt as plain text instead of a chat user message.")
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(dir_okay=False),
    callback=output_file,
    help="Also write the trace here.",
)
def generate(prompt, model, max_tokens, temperature, top_p, top_k, seed, raw, trace_path, **options):
    """Generate from PROMPT through the paged cache; stream the text, then print TTFT and TPOT."""
    from engine.core.request import SamplingParams

    engine = load_engine(model, engine_config(**options))
    if trace_path:
        engine.add_trace_file(trace_path)
    try:
        params = SamplingParams(
            max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed
        )
        text = (
            prompt
            if raw or engine.tokenizer is None or not engine.tokenizer.chat_template
            else [{"role": "user", "content": prompt}]
        )
        request_id = engine.submit(text, params)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None

    from engine.models.stream_text import StreamDecoder

    decoder = StreamDecoder(engine.tokenizer) if engine.tokenizer is not None else None

    # whole characters only: an emoji split over byte tokens prints once it is complete
    def stream(event):
        if event["type"] == "token_emitted" and event["request_id"] == request_id:
            click.echo(decoder.push(event["token_id"]) if decoder else event["text"], nl=False)

    engine.trace.listeners.append(stream)
    while engine.has_unfinished():
        engine.step()
    engine.close()
    if decoder is not None:
        click.echo(decoder.flush(), nl=False)
    out = engine.output(request_id)
    tpot = f"{out.tpot * 1000:.1f} ms" if out.tpot is not None else "n/a (one token)"
    # the modes that differ from the defaults, so a pasted summary says how it ran
    modes = [
        name
        for name, on in (
            ("whole-block hits", not engine.config.partial_hits),
            ("no prefix cache", not engine.config.prefix_cache),
        )
        if on
    ]
    click.echo()
    click.echo(
        f"\n-- {len(out.token_ids)} tokens ({out.finish_reason}); TTFT {out.ttft * 1000:.1f} ms; TPOT {tpot}"
        + (f"; {', '.join(modes)}" if modes else ""),
        err=True,
    )


@click.command()
@click.option(
    "--workload",
    "-w",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Workload JSON (see fixtures/workloads/).",
)
@click.option(
    "--out",
    "-o",
    required=True,
    type=click.Path(dir_okay=False),
    callback=output_file,
    help="Trace file to write (JSONL).",
)
@engine_options
@publish_option
def record(workload, out, model, publish, **options):
    """Run a WORKLOAD headless and write its trace to OUT."""
    from engine.workload import WorkloadError, load_workload, run_workload

    try:
        spec = load_workload(workload)
    except WorkloadError as exc:
        raise click.ClickException(str(exc)) from None
    # a bad address fails before the model loads
    publisher = open_publisher(publish) if publish else None
    engine = load_engine(model, engine_config(spec.engine, **options))
    engine.add_trace_file(out)
    if publisher is not None:
        # the header first: it names the KV-cache groups
        publisher(engine.trace.header)
        engine.trace.listeners.append(publisher)
        click.echo(f"publishing vLLM KV events on {publisher.endpoint}", err=True)
    from engine.worker.machine_probe import emit_roofline

    # this machine's roofline for the model, once, for the roofline view
    emit_roofline(engine)
    # an edited request finishes once more
    total = len(spec.requests) + len(spec.edits)
    done = 0

    def progress(output):
        nonlocal done
        done += 1
        click.echo(
            f"  [{done}/{total}] {output.request_id}: {len(output.token_ids)} tokens, "
            f"{output.cached_tokens} cached, TTFT {output.ttft * 1000:.0f} ms",
            err=True,
        )

    click.echo(f"recording {spec.name}: {total} requests -> {out}", err=True)
    try:
        run_workload(engine, spec, on_finished=progress)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        engine.close()
        if publisher is not None:
            publisher.close()
    click.echo(f"wrote {out}", err=True)


COMMANDS = [generate, record] + compare_commands.COMMANDS
