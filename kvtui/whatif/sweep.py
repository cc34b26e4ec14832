"""A what-if sweep (`kvtui whatif`, kvtui/commands/whatif_commands.py): the same workload through every
configuration asked for (capacities x block sizes x policies x batch budgets x prefix caching), simulated
through the real scheduler and manager (runs.py, side by side with --jobs or --ray: jobs.py) and / or as the
one-pass LRU curve with its Belady bound (onepass.py), against the ceiling, with the answers people ask of a
curve (answers.py), across fleets of workers and routers, and against the server's own cached tokens when
the log has them (fidelity.py). Torch-free.

The ceiling is the one-pass curve's own limit (every whole prompt block seen before hits) whenever the
one-pass model says what an infinite cache does: a one-pass report, and hash-id workloads, whose generated
tokens are never cached. Token workloads under simulation cache their generated tokens too (the next turn of
a chat reuses them), so there the ceiling is a simulated run with room for everything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kvtui.whatif.cost import CostModel

# Belady's bound by default up to this many block references (about a second a capacity per million)
OPTIMAL_AUTO_REFERENCES = 5_000_000


@dataclass
class SweepOptions:
    method: str = "both"
    trace_out: str | None = None
    workers: int = 1
    routers: tuple[str, ...] = ("kv_aware",)
    overlap_weight: float = 1.0
    temperature: float = 0.0
    seed: int = 0
    per_request: int = 0
    cost: CostModel = field(default_factory=CostModel)
    quiet: bool = False
    make_progress: Callable | None = None
    jobs: int = 1
    ray: str | None = None
    # shares of the ceiling to find the smallest capacity for (0.8 = 80%)
    targets: tuple[float, ...] = ()
    # the capacities asked and their K/V precisions (precisions.py); None: tokens only
    plan: object = None
    # None: Belady's bound unless the workload is very large
    optimal: bool | None = None
    # --host-capacity / --disk-capacity (tiers.py's TierOptions); None: the device only
    tiers: object = None
    # --sample: the one-pass curve from this share of the blocks (SHARDS, sampled.py); None: every block
    sample: float | None = None


def sweep_configs(caps, sizes, policies, batch, caching, cost, partial_hits=True, tiers=None):
    """Every combination of the options, the first one the current configuration (what -o writes); with
    `tiers` (tiers.py's TierOptions) each host and disk capacity under each cached one."""
    from kvtui.whatif.simulate import SimConfig

    def lower(bs, cache):
        if tiers is None or not cache:
            return [(0, 0)]
        return [(h, k) for h in tiers.hosts[bs] for k in tiers.disks[bs]]

    return [
        SimConfig(cap, bs, policy, cache, mbt, mns, cost, partial_hits, host, disk)
        for bs in sizes
        for cap in caps[bs]
        for policy in policies
        for mbt, mns in batch
        for cache in caching
        for host, disk in lower(bs, cache)
    ]


def run_sweep(loaded, configs, opts: SweepOptions, ones: dict | None = None) -> dict:
    """Run every configuration as `opts.method` says, the ceiling, the answers and the fleets: the report
    (report.py's keys), plus `current` and `current_misses` for the first configuration. `loaded`: a
    requests.Workload, or a stream.StreamedWorkload with its curves already in `ones` (one-pass only)."""
    from kvtui.whatif.report import as_json

    method, first = opts.method, configs[0]
    plan = opts.plan
    precisions = plan.precisions if plan is not None else ()
    prompt = loaded.prompt_tokens
    notes = list(loaded.notes) + [
        f"cost model: {opts.cost.describe()}",
        "token hit rate = prompt tokens never computed by their request / prompt "
        "tokens (a preempted request's recomputed tokens are misses)",
    ]
    if not first.partial_hits:
        notes.append(
            "hits in whole blocks only, no partly filled block kept (--whole-blocks), as vLLM serves them"
        )
    progress = _progress_factory(opts, loaded.num_requests)
    lru_sizes = sorted({(c.block_size, c.capacity_tokens) for c in configs if c.prefix_cache})
    one_pass_wanted = method in ("both", "one-pass") and bool(lru_sizes)
    curve_from_one_pass = method == "one-pass" or loaded.hash_ids
    if ones is None:
        sizes = {bs for bs, _ in lru_sizes} if one_pass_wanted else set()
        sizes.add(first.block_size)
        keep = one_pass_wanted and opts.optimal is not False
        ones = _one_passes(loaded, sorted(sizes), keep, progress, opts.sample, opts.seed)
    first_curve = ones[first.block_size].curve()
    if curve_from_one_pass:
        ceiling = first_curve.ceiling_tokens / prompt if prompt else 0.0
        ceiling_source = "one-pass"
    else:
        ceiling = _simulated_ceiling(loaded, first, progress)
        ceiling_source = "simulated"
    points, detail, first_misses, first_hits = [], None, {}, None
    if method in ("both", "simulated"):
        from kvtui.whatif.fidelity import has_server_cached

        want_hits = has_server_cached(loaded)
        points, detail, first_misses, first_hits = _simulated(loaded, configs, opts, want_hits, progress)
        if opts.tiers is not None:
            from kvtui.whatif.tiers import price_simulated

            price_simulated(points, opts.tiers.cost, prompt, ones[first.block_size].arrival_span)
    optimal, curve = [], []
    if one_pass_wanted:
        more, optimal, curve = _one_pass_points(ones, lru_sizes, first, prompt, opts, notes, progress)
        points += more
        if method == "one-pass":
            # no simulation ran: the current configuration's misses are the one-pass split
            current = [
                p
                for p in more
                if (p["capacity_tokens"], p["block_size"]) == (first.capacity_tokens, first.block_size)
            ]
            if current:
                first_misses = dict(current[0]["misses"])
    report = as_json(loaded, ceiling, points, optimal, notes, None, detail)
    report["ceiling"]["source"] = ceiling_source
    report["curve"] = curve
    if opts.tiers is not None:
        from kvtui.whatif.tiers import tier_section

        one = ones[first.block_size]
        report["tiers"] = tier_section(first_curve, first.block_size, opts.tiers, prompt, one.arrival_span)
        notes += report["tiers"].pop("notes")
    if opts.targets:
        from kvtui.whatif.answers import targets

        report["targets"] = [
            {**t, "kv_dtype": p.kv_dtype if p else None}
            for p in precisions or [None]
            for t in targets(first_curve, first.block_size, opts.targets, p and p.bytes_per_token, prompt)
        ]
    if plan is not None:
        from kvtui.whatif.precisions import at_precisions, rounded_entries

        report["points"] = at_precisions(points, plan.rows)
        report["precisions"] = [
            {"kv_dtype": p.kv_dtype, "bytes_per_token": p.bytes_per_token} for p in precisions
        ]
        if len(precisions) == 1:
            report["bytes_per_token"] = precisions[0].bytes_per_token
        report["capacities_rounded"] = rounded_entries(plan) + list(opts.tiers.rounded if opts.tiers else ())
    if opts.workers > 1:
        from kvtui.whatif.fleets import run_fleets

        report["fleet"], report["fleets"] = run_fleets(loaded, first, opts, progress)
        notes.append(
            "fleet regret (Dynamo's): per request, the longest prefix cached on any worker at arrival "
            "(reachable) against the chosen worker's (achieved); global cache = one worker with the "
            "fleet's total capacity, batch budget and sequences"
        )
    if first_hits is not None:
        from kvtui.whatif.fidelity import fidelity_section

        report["fidelity"] = fidelity_section(loaded, first_hits, first)
    report["current"] = {
        "capacity_tokens": first.capacity_tokens,
        "block_size": first.block_size,
        "eviction": first.eviction if first.prefix_cache else "none",
    }
    at = plan.rows.get((first.block_size, first.capacity_tokens)) if plan is not None else None
    if at:
        report["current"]["kv_dtype"] = at[0].kv_dtype
    if opts.tiers is not None:
        host, disk = opts.tiers.current(first.block_size)
        report["current"].update(host_capacity_tokens=host, disk_capacity_tokens=disk)
    report["current_misses"] = first_misses
    return report


def _progress_factory(opts: SweepOptions, n: int):
    from kvtui.whatif.simulate import Progress

    def progress(label):
        if opts.make_progress is not None:
            return opts.make_progress(label)
        return Progress(label, n, enabled=not opts.quiet and n >= 200)

    return progress


def _one_passes(loaded, sizes, keep_chains, progress, sample=None, seed=0) -> dict:
    from kvtui.whatif.onepass import of_workload

    progress("the one-pass curve")(0, 0.0)
    return {bs: of_workload(loaded, bs, keep_chains, sample, seed) for bs in sizes}


def _simulated_ceiling(loaded, first, progress) -> float:
    from kvtui.whatif.simulate import simulate

    if first.kv_groups:
        from kvtui.whatif.hybrid_timeline import hybrid_ceiling

        return hybrid_ceiling(loaded.requests, first)
    n = loaded.num_requests
    total = sum(r.num_prompt_tokens + r.num_output_tokens for r in loaded.requests)
    room = (total // first.block_size + 2 * n + 1) * first.block_size
    infinite = replace(first, capacity_tokens=room, host_capacity_tokens=0, disk_capacity_tokens=0)
    return simulate(loaded.requests, infinite, loaded.hash_ids, progress=progress("ceiling")).token_hit_rate


def _simulated(loaded, configs, opts: SweepOptions, want_hits: bool, progress):
    """Every configuration simulated (in parallel with --jobs / --ray): points, the first one's worst
    requests, its misses and its per-request hits."""
    import sys

    from kvtui.whatif.capacity import human_tokens
    from kvtui.whatif.jobs import run_jobs
    from kvtui.whatif.runs import SimJob, simulated_job

    vary = tuple(
        k
        for k in ("max_batched_tokens", "max_num_seqs", "prefix_cache")
        if len({getattr(c, k) for c in configs}) > 1
    )
    serial = opts.jobs <= 1 and not opts.ray
    jobs = []
    for i, config in enumerate(configs):
        label = f"{human_tokens(config.capacity_tokens)} {config.eviction}"
        jobs.append(
            SimJob(
                config,
                vary,
                opts.trace_out if i == 0 else None,
                opts.per_request if i == 0 else 0,
                want_hits and i == 0,
                label,
                # made when the run starts, so that its clock starts then
                (lambda label=label: progress(label)) if serial else None,
            )
        )

    def done(i, result):
        if not serial and not opts.quiet:
            print(f"  {jobs[i].label}: simulated", file=sys.stderr, flush=True)

    results = run_jobs(simulated_job, (loaded.requests, loaded.hash_ids), jobs, opts.jobs, opts.ray, done)
    first = results[0]
    return [r["point"] for r in results], first["detail"], first["misses"], first["hits"]


def _one_pass_points(ones, lru_sizes, first, prompt, opts: SweepOptions, notes, progress):
    from kvtui.whatif.onepass import dense_points

    points, optimal, curve = [], [], []
    progress("the one-pass curve and the Belady bound")(0, 0.0)
    for bs in sorted({b for b, _ in lru_sizes}):
        one = ones[bs]
        cap_list = [c for b, c in lru_sizes if b == bs]
        lru = one.curve()
        if opts.tiers is not None:
            from kvtui.whatif.tiers import tier_points

            t = opts.tiers
            points += tier_points(
                lru, bs, cap_list, t.hosts[bs], t.disks[bs], prompt, t.cost, one.arrival_span
            )
        else:
            points += [_plain_point(lru, bs, cap, prompt) for cap in cap_list]
        if bs != first.block_size:
            continue
        curve = dense_points(lru, bs, prompt)
        if one.sampler is not None:
            notes.append(sampled_note(one))
            continue
        auto_off = opts.optimal is None and one.references > OPTIMAL_AUTO_REFERENCES
        if opts.optimal is False or auto_off or not one.keep_chains:
            if auto_off or (not one.keep_chains and opts.optimal is not False):
                notes.append(
                    f"Belady's bound left out: {one.references:,} block references (about "
                    f"{one.references / 1e6:.0f} s a capacity); --optimal computes it"
                )
            continue
        best = one.optimal(cap_list)
        optimal = [
            {"capacity_tokens": cap, "token_hit_rate": p.hit_tokens / prompt if prompt else 0.0}
            for cap, p in zip(cap_list, best)
        ]
    notes.append(
        "one-pass: LRU over whole prompt blocks, requests one at a time in arrival order, no "
        "pinning, generated tokens and partial blocks never cached (kvtui/whatif/curve.py)"
    )
    return points, optimal, curve


def sampled_note(one) -> str:
    """What a sampled curve is, said in the report."""
    sampler = one.sampler
    heavy = (
        f", and the {sampler.heavy_refs:,} references of blocks a first pass found in at least "
        f"{sampler.heavy_threshold:,.0f} requests kept whole"
        if sampler.heavy_refs
        else ""
    )
    exact = sampler.exact_blocks
    resolution = (
        f"capacities up to {exact:,} blocks are exact (the top of the stack, kept from every reference)"
        if exact
        else f"capacities under {round(10 / sampler.rate):,} blocks are a few sampled blocks deep and read "
        "less surely"
    )
    return (
        f"sampled: SHARDS over {100 * sampler.rate:g}% of the blocks (by their prefix hash, seed "
        f"{sampler.seed}){heavy}: {one.distinct_blocks:,} distinct blocks kept of {sampler.total_blocks:,} "
        "block references; each one-pass rate has +/- one standard error (token_hit_rate_error, from 8 hash "
        f"groups); {resolution}; Belady's bound needs every block and is left out"
    )


def _plain_point(lru, bs: int, cap: int, prompt: int) -> dict:
    """The one-pass point of a device-only cache (with its standard error where the curve is sampled)."""
    h = lru.hit_tokens(cap // bs)
    error = {"token_hit_rate_error": lru.hit_rate_error(cap // bs)} if lru.error_cum is not None else {}
    return {
        **error,
        "capacity_tokens": cap,
        "block_size": bs,
        "eviction": "lru",
        "method": "one-pass",
        "token_hit_rate": h / prompt if prompt else 0.0,
        "misses": {
            "capacity": lru.ceiling_tokens - h,
            "compulsory_or_structural": prompt - lru.ceiling_tokens,
        },
    }
