"""`kvtui whatif WORKLOAD`: replay a workload through the real cache manager and scheduler with no model, under
other capacities, block sizes, policies, batch budgets or fleets (kvtui/whatif/). Torch-free."""

from __future__ import annotations

import itertools
import json

import click

from kvtui.whatif.cost import CostModel

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
def whatif(
    workload,
    fmt,
    trace_block_size,
    tokenizer,
    capacities,
    kv_config,
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
    """
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
    bytes_per_token = None
    if kv_config:
        from engine.models.kv_budget import ConfigError, load_config, shape_from_config

        try:
            config, _ = load_config(kv_config)
            bytes_per_token = shape_from_config(config).kv_bytes_per_token()
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
    try:
        caps = {bs: parse_capacities(capacities, bs, bytes_per_token) for bs in sizes}
    except CapacityError as exc:
        raise click.ClickException(str(exc)) from None
    cost = CostModel(step_ms / 1e3, prefill_us / 1e6, decode_ms / 1e3)
    batch = list(itertools.product(_ints(mbts, "--max-batched-tokens"), _ints(mnss, "--max-num-seqs")))
    caching = [True, False] if no_prefix_cache else [True]
    configs = _configs(caps, sizes, policies, batch, caching, cost, not whole_blocks)
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
        report = _run(
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


def _configs(caps, sizes, policies, batch, caching, cost, partial_hits=True):
    from kvtui.whatif.simulate import SimConfig

    return [
        SimConfig(cap, bs, policy, cache, mbt, mns, cost, partial_hits)
        for bs in sizes
        for cap in caps[bs]
        for policy in policies
        for mbt, mns in batch
        for cache in caching
    ]


def _run(
    loaded,
    configs,
    method,
    hash_ids,
    trace_out,
    workers,
    router,
    overlap_weight,
    temperature,
    seed,
    per_request,
    cost,
    quiet,
    make_progress=None,
) -> dict:
    from dataclasses import replace

    from kvtui.whatif import onepass
    from kvtui.whatif.capacity import human_tokens
    from kvtui.whatif.report import as_json
    from kvtui.whatif.simulate import Progress, simulate

    n = len(loaded.requests)
    prompt = loaded.prompt_tokens
    notes = list(loaded.notes) + [
        f"cost model: {cost.describe()}",
        "token hit rate = prompt tokens never computed by their request / prompt "
        "tokens (a preempted request's recomputed tokens are misses)",
    ]
    if not configs[0].partial_hits:
        notes.append(
            "hits in whole blocks only, no partly filled block kept (--whole-blocks), as vLLM serves them"
        )
    vary = {
        k
        for k in ("max_batched_tokens", "max_num_seqs", "prefix_cache")
        if len({getattr(c, k) for c in configs}) > 1
    }

    def progress(label):
        if make_progress is not None:
            return make_progress(label)
        return Progress(label, n, enabled=not quiet and n >= 200)

    total = sum(r.num_prompt_tokens + r.num_output_tokens for r in loaded.requests)
    first = configs[0]
    infinite = replace(first, capacity_tokens=(total // first.block_size + 2 * n + 1) * first.block_size)
    ceiling = simulate(loaded.requests, infinite, hash_ids, progress=progress("ceiling"))
    points, detail = [], None
    first_misses: dict = {}
    if method in ("both", "simulated"):
        for i, config in enumerate(configs):
            result = simulate(
                loaded.requests,
                config,
                hash_ids,
                trace_out if i == 0 else None,
                progress(f"{human_tokens(config.capacity_tokens)} {config.eviction}"),
            )
            point = {
                "capacity_tokens": config.capacity_tokens,
                "block_size": config.block_size,
                "eviction": config.eviction if config.prefix_cache else "none",
                "method": "simulated",
                "token_hit_rate": result.token_hit_rate,
                "misses": dict(result.causes),
            }
            point.update({k: getattr(config, k) for k in sorted(vary)})
            point.update(
                steps=result.steps,
                preemptions=result.preemptions,
                reused_partial_tokens=result.partial_tokens,
                wall_seconds=round(result.wall_seconds, 3),
            )
            points.append(point)
            if i == 0:
                first_misses = dict(result.causes)
            if i == 0 and per_request:
                worst = sorted(
                    result.ledger.requests.values(),
                    key=lambda r: r.prompt_tokens - r.hit_tokens,
                    reverse=True,
                )[:per_request]
                detail = [r.as_dict() for r in worst]
    optimal, curve = [], []
    lru_sizes = sorted({(c.block_size, c.capacity_tokens) for c in configs if c.prefix_cache})
    if method in ("both", "one-pass") and lru_sizes:
        progress("the one-pass curve and the Belady bound")(0, 0.0)
        for bs in sorted({b for b, _ in lru_sizes}):
            cap_list = [c for b, c in lru_sizes if b == bs]
            lru = onepass.lru_curve_of(loaded, bs)
            hits = [lru.hit_tokens(c // bs) for c in cap_list]
            best = onepass.optimal_points(loaded, bs, cap_list)
            ceiling_blocks = lru.ceiling_tokens
            if bs == first.block_size:
                curve = onepass.dense_points(lru, bs, prompt)
            for cap, h, o in zip(cap_list, hits, best):
                points.append(
                    {
                        "capacity_tokens": cap,
                        "block_size": bs,
                        "eviction": "lru",
                        "method": "one-pass",
                        "token_hit_rate": h / prompt if prompt else 0.0,
                        "misses": {
                            "capacity": ceiling_blocks - h,
                            "compulsory_or_structural": prompt - ceiling_blocks,
                        },
                    }
                )
                if bs == first.block_size:
                    optimal.append({"capacity_tokens": cap, "token_hit_rate": o / prompt if prompt else 0.0})
        notes.append(
            "one-pass: LRU over whole prompt blocks, requests one at a time in arrival order, no "
            "pinning, generated tokens and partial blocks never cached (kvtui/whatif/curve.py)"
        )
    fleet = None
    if workers > 1:
        from kvtui.whatif.fleet import compare_fleet
        from kvtui.whatif.routers import Router

        fleet = compare_fleet(
            loaded.requests,
            first,
            workers,
            Router(router, seed, overlap_weight, temperature),
            hash_ids,
            progress("fleet (3 runs: this router, longest prefix, one cache)"),
        )
        notes.append(
            "fleet: regret = the longest-cached-prefix router's hit rate minus this router's; global "
            "cache = one worker with the fleet's total capacity, batch budget and sequences"
        )
    report = as_json(loaded, ceiling.token_hit_rate, points, optimal, notes, fleet, detail)
    report["curve"] = curve
    report["current"] = {
        "capacity_tokens": first.capacity_tokens,
        "block_size": first.block_size,
        "eviction": first.eviction if first.prefix_cache else "none",
    }
    report["current_misses"] = first_misses
    return report


COMMANDS = [whatif]
