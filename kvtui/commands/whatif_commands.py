"""`kvtui whatif WORKLOAD`: replay a workload through the real cache manager and scheduler with no model, under
other capacities, block sizes, policies, batch budgets or fleets (kvtui/whatif/; the runs themselves are
kvtui/whatif/sweep.py). Torch-free."""

from __future__ import annotations

import itertools
import json

import click

from kvtui.whatif.cost import CostModel
from kvtui.whatif.sweep import run_sweep, sweep_configs

COST = CostModel()
LARGE_TRACE_REQUESTS = 2000


def _ints(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: a comma-separated list of whole numbers", param_hint=name
        ) from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"{text!r}: give numbers of at least 1", param_hint=name)
    return values


def _slice(text: str | None) -> tuple[int | None, int | None]:
    if not text:
        return None, None
    try:
        a, b = text.split(":")
        return (int(a) if a else None), (int(b) if b else None)
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: write A:B (request indices, arrival order)", param_hint="--requests"
        ) from None


@click.command("whatif")
@click.argument("workload", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["trace", "workload", "mooncake", "proxy-log"]),
    help="Override the format detected from the content.",
)
@click.option("--trace-block-size", default=512, show_default=True, help="Tokens per hash id (Mooncake).")
@click.option("--tokenizer", help="tokenizer.json or directory for a workload JSON with text prompts.")
@click.option(
    "--capacity",
    "capacities",
    default="1M",
    show_default=True,
    help="Cache sizes, a list: tokens (100k,3M), blocks (4096b), bytes (80GiB, with --kv-config).",
)
@click.option("--kv-config", help="A model's config.json or directory: bytes per token for byte capacities.")
@click.option(
    "--kv-dtype",
    "kv_dtypes",
    help="With --kv-config: byte capacities at these K/V precisions, a list (bfloat16,fp8,int8; 8-bit rows "
    "carry a 4-byte scale per token and KV head) [the config's dtype].",
)
@click.option(
    "--block-size",
    "block_sizes",
    help="Tokens per block, a list (default: the trace block size for hash-id workloads, else 16).",
)
@click.option("--eviction", "evictions", default="lru", show_default=True, help="lru, lfu, cost; a list.")
@click.option("--no-prefix-cache", is_flag=True, help="Also run with prefix caching off.")
@click.option(
    "--whole-blocks",
    is_flag=True,
    help="Simulate hits in whole blocks only, no partly filled block kept, as vLLM and SGLang serve them "
    "(for a vLLM proxy log, to compare with vLLM's own cached tokens).",
)
@click.option(
    "--max-batched-tokens", "mbts", default="8192", show_default=True, help="Token budget per step; a list."
)
@click.option(
    "--max-num-seqs", "mnss", default="256", show_default=True, help="Requests running at once; a list."
)
@click.option(
    "--method",
    type=click.Choice(["both", "simulated", "one-pass"]),
    default="both",
    show_default=True,
    help="Full simulation, the one-pass LRU curve, or both.",
)
@click.option(
    "--requests", "request_slice", help="Only requests A:B (arrival order), e.g. for -o on a big trace."
)
@click.option(
    "-o",
    "--output",
    "trace_out",
    type=click.Path(dir_okay=False),
    help="Write the simulated run of the first configuration (the current one) as a kvtui trace; "
    "the others are in its what-if summary.",
)
@click.option("--workers", default=1, show_default=True, help="Workers in a fleet (one capacity each).")
@click.option(
    "--router",
    type=click.Choice(["round_robin", "random", "least_loaded", "kv_aware"]),
    default="kv_aware",
    show_default=True,
)
@click.option("--overlap-weight", default=1.0, show_default=True, help="kv_aware: weight of prefill blocks.")
@click.option("--router-temperature", default=0.0, show_default=True, help="kv_aware: softmax temperature.")
@click.option("--seed", default=0, show_default=True)
@click.option("--step-ms", default=COST.per_step * 1e3, show_default=True, help="Cost model: ms per step.")
@click.option(
    "--prefill-us",
    default=COST.per_prefill_token * 1e6,
    show_default=True,
    help="Cost model: us per prefill token.",
)
@click.option(
    "--decode-ms", default=COST.per_decode_row * 1e3, show_default=True, help="Cost model: ms per decode row."
)
@click.option("--per-request", default=0, help="Show the N requests with the most missed tokens and why.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object (keys in kvtui/whatif/report.py).")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines on stderr.")
@click.option(
    "--ui",
    is_flag=True,
    help="Show the curve, the miss causes and the fleet in the terminal UI (a progress bar while it runs).",
)
@click.option(
    "--as-recorded",
    is_flag=True,
    help="A kvtui engine trace run again at the engine's own settings, with its arrivals, edits, forks and "
    "aborts by step: each prefix lookup against the engine's (the twin's accuracy on our own traces).",
)
def whatif(
    workload,
    fmt,
    trace_block_size,
    tokenizer,
    capacities,
    kv_config,
    kv_dtypes,
    block_sizes,
    evictions,
    no_prefix_cache,
    whole_blocks,
    mbts,
    mnss,
    method,
    request_slice,
    trace_out,
    workers,
    router,
    overlap_weight,
    router_temperature,
    seed,
    step_ms,
    prefill_us,
    decode_ms,
    per_request,
    as_json,
    quiet,
    ui,
    as_recorded,
):
    """What if the cache were different: WORKLOAD (a kvtui trace, a workload JSON, a Mooncake JSONL or a proxy
    request log) through the real scheduler and KV-cache manager with no model.

    \b
    Time comes from a stated cost model: step = --step-ms + --prefill-us x prefill tokens + --decode-ms x
    decode rows (defaults: 5 ms, 25 us, 0.2 ms). Every missed prompt token gets a cause.
    The optimal column (Belady) and the one-pass curve count whole blocks: without --whole-blocks the simulation
    also serves partly filled blocks and can score above them.

    \b
    Examples:
      kvtui whatif trace.jsonl --capacity 1k,4k,16k
      kvtui whatif mooncake.jsonl --capacity 100k,1M,10M --eviction lru,lfu --json
      kvtui whatif mooncake.jsonl --capacity 1M --workers 4 --router kv_aware
      kvtui whatif mooncake.jsonl --capacity 1M --requests 0:200 -o sim.jsonl   (then: kvtui replay sim.jsonl)
      kvtui whatif requests.jsonl --whole-blocks --block-size 32 --capacity 4096b,8192b
                                  a kvtui proxy log at vLLM's granularity: twice the blocks?
      kvtui whatif mooncake.jsonl --capacity 300k,3M,30M --ui
      kvtui whatif fixtures/traces/concurrent8.jsonl --as-recorded
    """
    if as_recorded:
        return _as_recorded(workload, as_json)
    from kvtui.whatif.capacity import CapacityError, parse_capacities
    from kvtui.whatif.loaders import WorkloadFormatError, load

    try:
        loaded = load(workload, fmt, trace_block_size, tokenizer)
    except (WorkloadFormatError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    loaded = loaded.slice(*_slice(request_slice))
    if not loaded.requests:
        raise click.ClickException("no requests to run (check --requests)")
    hash_ids = loaded.hash_ids
    sizes = _ints(block_sizes, "--block-size") if block_sizes else [trace_block_size if hash_ids else 16]
    policies = [p.strip() for p in evictions.split(",") if p.strip()]
    for p in policies:
        if p not in ("lru", "lfu", "cost"):
            raise click.BadParameter(f"{p!r}: choose lru, lfu or cost", param_hint="--eviction")
    # K/V precision -> bytes per token (one entry, None: the config's dtype, or no config)
    per_token: dict[str | None, int | None] = {None: None}
    if kv_config:
        from engine.models.kv_budget import ConfigError, bytes_per_token_at, load_config, shape_from_config

        try:
            config, _ = load_config(kv_config)
            shape = shape_from_config(config)
            wanted = [d.strip() for d in (kv_dtypes or "").split(",") if d.strip()] or [None]
            per_token = {d: bytes_per_token_at(shape, d) for d in wanted}
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
    elif kv_dtypes:
        raise click.BadParameter("converts byte capacities: give --kv-config too", param_hint="--kv-dtype")
    try:
        # every precision's capacities in one run: 80GiB at fp8 beside 80GiB at bfloat16
        caps = {
            bs: list(
                dict.fromkeys(c for b in per_token.values() for c in parse_capacities(capacities, bs, b))
            )
            for bs in sizes
        }
    except CapacityError as exc:
        raise click.ClickException(str(exc)) from None
    if kv_dtypes and not quiet:
        for d, b in per_token.items():
            tokens = ", ".join(f"{c:,}" for c in parse_capacities(capacities, sizes[0], b))
            click.echo(f"K/V at {d}: {b:,} B per token; --capacity {capacities} = {tokens} tokens", err=True)
    cost = CostModel(step_ms / 1e3, prefill_us / 1e6, decode_ms / 1e3)
    batch = list(itertools.product(_ints(mbts, "--max-batched-tokens"), _ints(mnss, "--max-num-seqs")))
    caching = [True, False] if no_prefix_cache else [True]
    configs = sweep_configs(caps, sizes, policies, batch, caching, cost, not whole_blocks)
    if trace_out and workers > 1:
        raise click.ClickException("-o writes one worker's run: leave out --workers")
    if trace_out and method == "one-pass":
        raise click.ClickException("-o writes the simulated run: use --method simulated or both")
    if trace_out and len(loaded.requests) > LARGE_TRACE_REQUESTS and not request_slice:
        raise click.ClickException(
            f"{len(loaded.requests):,} requests make a trace too big to replay: write a "
            f"slice with --requests A:B (up to {LARGE_TRACE_REQUESTS} requests)"
        )

    def job(make_progress=None) -> dict:
        report = run_sweep(
            loaded,
            configs,
            method,
            hash_ids,
            trace_out,
            workers,
            router,
            overlap_weight,
            router_temperature,
            seed,
            per_request,
            cost,
            quiet,
            make_progress,
        )
        misses = report.pop("current_misses")
        if trace_out:
            from kvtui.whatif.report import append_summary, summary_event

            append_summary(trace_out, summary_event(report, report["current"], misses))
        return report, misses

    if ui:
        from kvtui.app.whatif_app import WhatIfApp
        from kvtui.whatif.report import summary_event

        def ui_job(make_progress) -> dict:
            report, misses = job(make_progress)
            return summary_event(report, report["current"], misses)

        stages = 1 + (len(configs) if method != "one-pass" else 0) + (method != "simulated") + (workers > 1)
        WhatIfApp(ui_job, source=loaded.name, requests=len(loaded.requests), stages=stages).run()
        return
    report, _ = job()
    if as_json:
        click.echo(json.dumps(report, indent=1))
    else:
        from kvtui.whatif.report import as_table

        click.echo(as_table(report))
        if trace_out:
            click.echo(f"\nwrote {trace_out}: kvtui replay {trace_out}   kvtui stats {trace_out}")


COMMANDS = [whatif]


def _as_recorded(path: str, as_json: bool) -> None:
    from kvtui.whatif.as_recorded import compare

    try:
        result = compare(path)
    except (ValueError, KeyError) as exc:
        raise click.ClickException(f"--as-recorded: {exc}") from None
    if as_json:
        differ = [{"request_id": r, "engine": a, "replay": b} for r, a, b in result.differ]
        click.echo(json.dumps({"lookups": result.lookups, "equal": result.equal, "differ": differ}))
        return
    click.echo(
        f"{path}: {result.equal} of {result.lookups} prefix lookups got exactly the engine's hit tokens "
        "(the engine core at the trace's settings, arrivals, edits, forks and aborts by step)"
    )
    for rid, engine_hits, replay_hits in result.differ:
        click.echo(f"  {rid}: engine {engine_hits} tokens, replay {replay_hits}")
    if result.differ:
        raise SystemExit(1)
