"""`kvtui bench tiers`: loading a block from the host tier against computing its tokens again (kvtui/bench/tiers.py;
added to the `kvtui bench` group in bench_commands.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import click

from kvtui.commands.bench_engine_commands import THREADS, _say, _threads
from kvtui.commands.engine_options import engine_config, engine_options, load_engine


@click.command("tiers", short_help="Load a block from the host tier vs compute it again, per block.")
@engine_options
@click.option(
    "--blocks",
    type=click.IntRange(1, 4096),
    default=16,
    show_default=True,
    help="Whole blocks in the prompt (its length is blocks x block size + 1).",
)
@click.option("--rounds", type=click.IntRange(min=1), default=5, show_default=True, help="Rounds; medians.")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
@THREADS
def tiers_bench(model, blocks, rounds, as_json, threads, **options):
    """A prompt of BLOCKS whole blocks, four ways per round: nothing cached, on the device, evicted to host
    (the offload timed), loaded back from host. Per block: the time to compute its tokens again, to load it from
    host and to offload it. The figure is kept for the views (the pool's host tier shows it).

    \b
    Examples:
      kvtui bench tiers
      kvtui bench tiers --blocks 32 --rounds 9 --block-size 16
    """
    from kvtui.bench.tiers import format_tiers, run_tiers, save
    from kvtui.state.tier_costs import tier_costs_path

    config = engine_config({"partial_hits": False}, **options)
    # the pool and the host tier hold the prompt, and one chunk prefills it: whatever was typed
    room = {"num_blocks": blocks + 4, "host_blocks": blocks + 4}
    try:
        config = replace(config, **room, max_batched_tokens=blocks * config.block_size + 1)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    _threads(threads)
    engine = load_engine(model, config)
    # a prompt no chat template shapes: the tokenizer's ids of plain text, repeated to length
    text = "A KV cache keeps the keys and values of every token so the next one need not compute them. "
    ids = engine.encode(text * (1 + blocks * config.block_size // 16))
    prompt = ids[: blocks * config.block_size + 1]
    costs = run_tiers(engine, prompt, rounds, progress=_say)
    save(costs, tier_costs_path())
    click.echo(json.dumps(costs.to_json(), indent=1) if as_json else format_tiers(costs))
