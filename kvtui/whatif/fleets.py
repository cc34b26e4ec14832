"""The fleets of a sweep: the same arrivals behind each router asked for (`--router kv_aware,round_robin`),
and one shared cache of the fleet's total size, each a job (runs.py) so that --jobs and --ray run them side
by side. The first router's entry is the report's `fleet`; all of them are `fleets`, each with its hit rate,
Dynamo's reachable and achieved hit rates and their difference (the regret), and the global-cache figure."""

from __future__ import annotations

import sys


def run_fleets(loaded, config, opts, progress) -> tuple[dict, list[dict]]:
    from kvtui.whatif.jobs import run_jobs
    from kvtui.whatif.runs import FleetJob, fleet_job

    jobs = [
        FleetJob(config, opts.workers, router, opts.seed, opts.overlap_weight, opts.temperature)
        for router in opts.routers
    ]
    jobs.append(FleetJob(config, opts.workers, opts.routers[0], kind="global"))
    serial = opts.jobs <= 1 and not opts.ray

    def done(i, result):
        if not opts.quiet and loaded.num_requests >= 200:
            what = "one shared cache" if jobs[i].kind == "global" else f"router {jobs[i].router}"
            print(f"  fleet, {what}: done", file=sys.stderr, flush=True)

    if serial:
        progress(f"fleets ({len(jobs)} runs: {', '.join(opts.routers)}, one shared cache)")(0, 0.0)
    results = run_jobs(fleet_job, (loaded.requests, loaded.hash_ids), jobs, opts.jobs, opts.ray, done)
    shared = results[-1]["token_hit_rate"]
    fleets = [dict(r, global_cache_token_hit_rate=shared) for r in results[:-1]]
    return fleets[0], fleets
