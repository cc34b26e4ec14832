"""`kvtui whatif WORKLOAD`: replay a workload through the real cache manager and scheduler with no model, under
other capacities, block sizes, policies, batch budgets or fleets (kvtui/whatif/; the runs themselves are
kvtui/whatif/sweep.py). Torch-free."""

from __future__ import annotations

import itertools
import json

import click

from kvtui.commands.output_path import output_file
from kvtui.commands.whatif_cost_options import cost_options
from kvtui.commands.whatif_helpers import (
    _as_recorded,
    _export,
    _ints,
    _slice,
    _stream,
    _streamable,
    check_readable,
    check_sample,
    check_trace_out,
    checked_choices,
    file_block_size,
    kv_capacities,
    refuse_ignored,
    server_defaults,
    tokenizer_option,
)
from kvtui.commands.whatif_hybrid_options import hybrid_configs, hybrid_options
from kvtui.commands.whatif_tier_options import tier_options, tiers_from_options
from kvtui.whatif.cost import CostModel
from kvtui.whatif.sweep import SweepOptions, run_sweep, sweep_configs


@click.command("whatif")
@click.argument("workload", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["trace", "workload", "mooncake", "bailian", "blocks", "proxy-log"]),
    help="Override the format detected from the content.",
)
@click.option(
    "--trace-block-size",
    type=click.IntRange(min=1),
    default=512,
    show_default=True,
    help="Tokens per hash id (Mooncake; Qwen-Bailian: 16).",
)
@click.option(
    "--tokenizer",
    callback=tokenizer_option,
    help="For a workload JSON with text prompts or chat messages: smollm2 or gemma3 (as --model takes them), "
    "a model directory or a tokenizer.json; chat messages go through its chat template, as kvtui record does.",
)
@click.option(
    "--capacity",
    "capacities",
    help="Cache sizes, a list: tokens (100k,3M), blocks (4096b), bytes (80GiB, with --kv-config). "
    "Default: the server's pool for a proxy log that recorded it, else 1M.",
)
@click.option(
    "--kv-config",
    help="A model's config.json or directory: bytes per token for byte capacities (and the tiers' loads).",
)
@tier_options
@hybrid_options
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
    "--whole-blocks/--partial-blocks",
    default=None,
    help="Hits in whole blocks only, no partly filled block kept, as vLLM and SGLang serve them (the default "
    "for a proxy log that recorded the server's settings), or partly filled blocks reused too.",
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
    "--sample",
    type=click.FloatRange(min=0, max=1, min_open=True),
    help="With --method one-pass: the curve from this share of the blocks (SHARDS, 0.01 = 1%), by their "
    "hash and --seed, with an error estimate; exact up to 256 / RATE blocks (25,600 at 1%), for traces "
    "too large for the exact pass.",
)
@click.option(
    "--requests", "request_slice", help="Only requests A:B (arrival order), e.g. for -o on a big trace."
)
@click.option(
    "-o",
    "--output",
    "trace_out",
    type=click.Path(dir_okay=False),
    callback=output_file,
    help="Write the simulated run of the first configuration (the current one) as a kvtui trace; "
    "the others are in its what-if summary (with --as-recorded: the re-run of the trace).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Workers in a fleet (one capacity each).",
)
@click.option(
    "--router",
    default="kv_aware",
    show_default=True,
    help="round_robin, random, least_loaded, kv_aware, longest_prefix; a list compares them on the same "
    "arrivals.",
)
@click.option(
    "--overlap-weight",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="kv_aware: weight of prefill blocks.",
)
@click.option(
    "--router-temperature",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="kv_aware: softmax temperature.",
)
@click.option("--seed", default=0, show_default=True)
@cost_options
@click.option(
    "--target",
    "target_text",
    help="Shares of the ceiling, a list (80%,90%): the smallest capacity reaching each (bytes with --kv-config).",
)
@click.option("--jobs", default=1, show_default=True, help="Runs, or --sample's hash ranges, on N cores.")
@click.option("--ray", "ray_address", help="Simulated runs or --sample's ranges on Ray: ADDRESS or local.")
@click.option(
    "--optimal/--no-optimal",
    default=None,
    help="Belady's bound at each capacity (default: unless the workload has over 5M block references).",
)
@click.option(
    "--export-anonymized",
    "export_path",
    type=click.Path(dir_okay=False),
    help="Write the workload as a Mooncake-format file of keyed hash ids (every shared prefix, nothing else).",
)
@click.option(
    "--anonymize-key",
    envvar="KVTUI_ANONYMIZE_KEY",
    help="The secret key of --export-anonymized (or KVTUI_ANONYMIZE_KEY).",
)
@click.option(
    "--per-request",
    type=click.IntRange(min=0),
    default=0,
    help="Show the N requests with the most missed tokens and why.",
)
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
    "aborts by step: every prefix lookup (at admission and again after a preemption or an edit) against the "
    "engine's (the twin's accuracy on our own traces); -o writes the re-run as a trace. Takes no other option "
    "but --json and -q.",
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
    sample,
    request_slice,
    trace_out,
    workers,
    router,
    overlap_weight,
    router_temperature,
    seed,
    latency,
    calibrate,
    step_ms,
    prefill_us,
    decode_ms,
    target_text,
    jobs,
    ray_address,
    optimal,
    export_path,
    anonymize_key,
    per_request,
    as_json,
    quiet,
    ui,
    as_recorded,
    prefix_match_unit,
    **tier_args,
):
    """What if the cache were different: WORKLOAD (a kvtui trace, a workload JSON, a Mooncake JSONL or a proxy
    request log) through the real scheduler and KV-cache manager with no model.

    \b
    Time comes from a stated cost model: step = --step-ms + --prefill-us x prefill tokens + --decode-ms x
    decode rows (defaults: 5 ms, 25 us, 0.2 ms). Every missed prompt token gets a cause.
    The optimal figure (Belady) and the one-pass curve count whole prompt blocks: the simulation also serves
    partly filled blocks and generated tokens, and its `above` line says by how many points.
    With --host-capacity (and --disk-capacity) a hit below the device costs its K/V bytes over the tier's
    bandwidth instead of 2 x parameters FLOPs at --gpu-tflops: each point says the prefill seconds it saves.

    \b
    Examples:
      kvtui whatif trace.jsonl --capacity 1k,4k,16k
      kvtui whatif mooncake.jsonl --capacity 100k,1M,10M --eviction lru,lfu --json
      kvtui whatif mooncake.jsonl --capacity 1M --workers 4 --router kv_aware,round_robin
      kvtui whatif mooncake.jsonl --method one-pass --target 80%,90% --kv-config config.json
      kvtui whatif mooncake.jsonl --capacity 1M --requests 0:200 -o sim.jsonl   (then: kvtui replay sim.jsonl)
      kvtui whatif requests.jsonl --whole-blocks --block-size 32 --capacity 4096b,8192b
                                  a kvtui proxy log at vLLM's granularity: twice the blocks?
      kvtui whatif mooncake.jsonl --capacity 300k,3M,30M --ui
      kvtui whatif mooncake.jsonl --capacity 1M,3M --host-capacity 3M,30M --kv-config config.json
                                  a host tier under each device: hits per tier, prefill seconds saved
      kvtui whatif trace.kvblk --method one-pass --sample 0.01 --capacity 1M,10M,100M
                                  a block trace (python -m kvtui.whatif.block_trace) sampled at 1%
      kvtui whatif fixtures/traces/concurrent8.jsonl --as-recorded
    """
    check_readable(workload)
    refuse_ignored(click.get_current_context(), workers)
    if as_recorded:
        return _as_recorded(workload, as_json, trace_out)
    from kvtui.whatif.loaders import WorkloadFormatError, detect_format, load

    routers, targets, policies = checked_choices(router, target_text, jobs, evictions)
    check_sample(sample, method, optimal)
    start, stop = _slice(request_slice)
    try:
        fmt = fmt or detect_format(workload)
    except WorkloadFormatError as exc:
        raise click.ClickException(str(exc)) from None
    if tokenizer and fmt != "workload":
        raise click.UsageError(
            f"--tokenizer reads a workload JSON's text prompts; this {fmt} carries token ids: leave it out"
        )
    trace_block_size = file_block_size(fmt, workload, trace_block_size)
    streamed = method == "one-pass" and workers == 1 and not trace_out and not ui and _streamable(fmt)
    ones = None
    try:
        if streamed:
            more = (sample, seed, optimal, jobs, ray_address)
            loaded, ones = _stream(workload, fmt, trace_block_size, block_sizes, start, stop, quiet, *more)
        if ones is None:
            loaded = load(workload, fmt, trace_block_size, tokenizer).slice(start, stop)
    except (WorkloadFormatError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    # what the trace reader skipped (a streamed Mooncake / Bailian file is never a trace: none)
    for text in getattr(loaded, "warnings", ()):
        click.echo(f"warning: {text}", err=True)
    if not loaded.num_requests:
        raise click.ClickException(
            f"no requests to run (check --requests {request_slice})"
            if request_slice
            else f"{workload}: no requests in it"
        )
    if export_path:
        return _export(loaded, export_path, anonymize_key, block_sizes, trace_block_size)
    hash_ids = loaded.hash_ids
    server = getattr(loaded, "server", None) or {}
    block_sizes, capacities, whole_blocks = server_defaults(
        loaded, server, block_sizes, capacities, whole_blocks
    )
    sizes = _ints(block_sizes, "--block-size") if block_sizes else [trace_block_size if hash_ids else 16]
    plan = kv_capacities(kv_config, kv_dtypes, capacities, sizes, quiet, tier_args["host_capacities"])
    bytes_per_token = plan.precisions[0].bytes_per_token if plan.precisions else None
    tiers = tiers_from_options(tier_args, sizes, bytes_per_token, kv_config, workers, quiet)
    cost = CostModel(step_ms / 1e3, prefill_us / 1e6, decode_ms / 1e3)
    cost = tiers.with_loads(cost) if tiers else cost
    batch = list(itertools.product(_ints(mbts, "--max-batched-tokens"), _ints(mnss, "--max-num-seqs")))
    caching = [True, False] if no_prefix_cache else [True]
    if server.get("enable_prefix_caching") is False:
        caching = [False]
    configs = sweep_configs(plan.caps, sizes, policies, batch, caching, cost, not whole_blocks, tiers)
    kv_dtype = plan.precisions[0].kv_dtype if plan.precisions else None
    configs, method = hybrid_configs(configs, loaded, kv_config, prefix_match_unit, method, kv_dtype)
    if trace_out:
        check_trace_out(loaded, workers, ray_address, method, request_slice)
    opts = SweepOptions(
        method=method,
        trace_out=trace_out,
        workers=workers,
        routers=tuple(routers),
        overlap_weight=overlap_weight,
        temperature=router_temperature,
        seed=seed,
        per_request=per_request,
        cost=cost,
        quiet=quiet,
        jobs=jobs,
        ray=ray_address,
        targets=tuple(targets),
        plan=plan,
        optimal=optimal,
        tiers=tiers,
        sample=sample,
    )

    def job(make_progress=None) -> dict:
        from dataclasses import replace

        from kvtui.whatif.jobs import JobsError

        try:
            report = run_sweep(loaded, configs, replace(opts, make_progress=make_progress), ones)
        except JobsError as exc:
            raise click.ClickException(str(exc)) from None
        misses = report.pop("current_misses")
        if latency or calibrate:
            from kvtui.whatif.latency_fit import latency_section

            report["latency"] = latency_section(loaded.requests, configs, calibrate)
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

        simulated_ceiling = method != "one-pass" and not hash_ids
        stages = (
            1
            + simulated_ceiling
            + (len(configs) if method != "one-pass" else 0)
            + (method != "simulated")
            + (workers > 1)
        )
        WhatIfApp(ui_job, source=loaded.name, requests=loaded.num_requests, stages=stages).run()
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
