"""One simulated configuration of a sweep as a job (jobs.py): what it returns is small and plain (a report
point, the worst requests, each request's hit tokens when a fidelity check needs them), so a job runs the
same in this process, in a forked one or on a Ray worker.

    simulated_job((requests, hash_ids), SimJob(config))  -> {"point", "misses", "detail", "hits"}
    fleet_job((requests, hash_ids), FleetJob(...))        -> the fleet's report entry (fleet.py)
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtui.whatif.simulate import SimConfig


@dataclass(frozen=True)
class SimJob:
    config: SimConfig
    # keys of the point beyond the standard ones (the sweep's varied settings)
    vary: tuple[str, ...] = ()
    trace_out: str | None = None
    per_request: int = 0
    # each request's hit tokens (the fidelity check against the server's cached tokens)
    want_hits: bool = False
    label: str = ""
    # makes the progress callback (arrived, simulated seconds) in this process; None in a parallel job
    progress: object = None


def simulated_job(shared, job: SimJob) -> dict:
    from kvtui.whatif.simulate import simulate

    requests, hash_ids = shared
    config = job.config
    if config.kv_groups:
        from kvtui.whatif.hybrid_timeline import hybrid_job

        return hybrid_job(shared, job)
    progress = job.progress() if job.progress is not None else None
    result = simulate(requests, config, hash_ids, job.trace_out, progress)
    point = {
        "capacity_tokens": config.capacity_tokens,
        "block_size": config.block_size,
        "eviction": config.eviction if config.prefix_cache else "none",
        "method": "simulated",
        "token_hit_rate": result.token_hit_rate,
        "misses": dict(result.causes),
    }
    point.update({k: getattr(config, k) for k in job.vary})
    if result.tier_hits is not None:
        point.update(
            host_capacity_tokens=config.host_capacity_tokens,
            disk_capacity_tokens=config.disk_capacity_tokens,
            tier_hit_tokens={t: result.tier_hits.get(t, 0) for t in ("device", "host", "disk")},
        )
    point.update(
        steps=result.steps,
        preemptions=result.preemptions,
        reused_partial_tokens=result.partial_tokens,
        generated_hit_tokens=result.generated_tokens,
        wall_seconds=round(result.wall_seconds, 3),
    )
    out: dict = {"point": point, "misses": dict(result.causes), "detail": None, "hits": None}
    if job.per_request:
        worst = sorted(
            result.ledger.requests.values(), key=lambda r: r.prompt_tokens - r.hit_tokens, reverse=True
        )[: job.per_request]
        out["detail"] = [r.as_dict() for r in worst]
    if job.want_hits:
        out["hits"] = {rid: (r.hit_tokens, dict(r.all_causes())) for rid, r in result.ledger.requests.items()}
    return out


@dataclass(frozen=True)
class FleetJob:
    config: SimConfig
    workers: int
    router: str
    seed: int = 0
    overlap_weight: float = 1.0
    temperature: float = 0.0
    # "fleet": the routed fleet; "global": one worker with the fleet's total capacity
    kind: str = "fleet"


def fleet_job(shared, job: FleetJob) -> dict:
    from dataclasses import replace

    from kvtui.whatif.fleet import simulate_fleet
    from kvtui.whatif.routers import Router
    from kvtui.whatif.simulate import simulate

    requests, hash_ids = shared
    config = job.config
    if job.kind == "global":
        shared_config = replace(
            config,
            capacity_tokens=config.capacity_tokens * job.workers,
            max_batched_tokens=config.max_batched_tokens * job.workers,
            max_num_seqs=config.max_num_seqs * job.workers,
        )
        return {"token_hit_rate": simulate(requests, shared_config, hash_ids).token_hit_rate}
    router = Router(job.router, job.seed, job.overlap_weight, job.temperature)
    return simulate_fleet(requests, config, job.workers, router, hash_ids).as_dict()
