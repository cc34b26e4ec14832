"""A what-if sweep (`kvtui whatif`, kvtui/commands/whatif_commands.py): the same workload through every
configuration asked for (capacities x block sizes x policies x batch budgets x prefix caching), simulated
through the real scheduler and manager and / or as the one-pass LRU curve with its Belady bound, against the
infinite-cache ceiling, and across a fleet of workers. Torch-free."""

from __future__ import annotations


def sweep_configs(caps, sizes, policies, batch, caching, cost, partial_hits=True):
    """Every combination of the options, the first one the current configuration (what -o writes)."""
    from kvtui.whatif.simulate import SimConfig

    return [
        SimConfig(cap, bs, policy, cache, mbt, mns, cost, partial_hits)
        for bs in sizes
        for cap in caps[bs]
        for policy in policies
        for mbt, mns in batch
        for cache in caching
    ]


def run_sweep(
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
    """Run every configuration as `method` says (the full simulation, the one-pass LRU curve and Belady bound,
    or both), the infinite-cache ceiling, and with workers > 1 the fleet comparison: the report (report.py's
    keys), plus `current` and `current_misses` for the first configuration. `make_progress(label)` gives
    the progress callback of each stage (the UI's bar), else progress lines on stderr unless quiet."""
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
                # no simulation ran: the current configuration's misses are the one-pass split
                if method == "one-pass" and (cap, bs) == (first.capacity_tokens, first.block_size):
                    first_misses = dict(points[-1]["misses"])
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
