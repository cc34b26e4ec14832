"""Independent runs of a sweep side by side: in this process, over local cores (`--jobs N`), or on a Ray
cluster (`--ray ADDRESS`, the optional extra `kvtui[ray]`). Each run is `fn(shared, item)` with a top-level
`fn`, the same `shared` workload for all, and one `item` (a configuration); results come back in the items'
order, so a parallel sweep reports exactly what a serial one does.

Local cores use forked processes: they inherit `shared` instead of receiving a pickled copy. Ray gets it once
through its object store (`ray.put`), so every task reads the same copy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# what forked workers read: set just before the pool starts, so children inherit it
_SHARED: Any = None


class JobsError(RuntimeError):
    pass


def _call(fn: Callable, item) -> Any:
    return fn(_SHARED, item)


def run_jobs(
    fn: Callable[[Any, Any], Any],
    shared: Any,
    items: Sequence,
    jobs: int = 1,
    ray_address: str | None = None,
    done: Callable[[int, Any], None] | None = None,
) -> list:
    """fn(shared, item) for every item; `done(i, result)` as each finishes (in any order)."""
    if ray_address:
        return _run_ray(fn, shared, items, ray_address, done)
    if jobs <= 1 or len(items) <= 1:
        results = []
        for i, item in enumerate(items):
            results.append(fn(shared, item))
            if done is not None:
                done(i, results[-1])
        return results
    return _run_processes(fn, shared, items, jobs, done)


def _run_processes(fn, shared, items, jobs, done) -> list:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    global _SHARED
    if "fork" not in multiprocessing.get_all_start_methods():
        raise JobsError("--jobs needs processes started by fork (Linux, macOS); run without --jobs")
    _SHARED = shared
    results: list = [None] * len(items)
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(jobs, len(items)), mp_context=context) as pool:
            futures = {pool.submit(_call, fn, item): i for i, item in enumerate(items)}
            for future in as_completed(futures):
                i = futures[future]
                results[i] = future.result()
                if done is not None:
                    done(i, results[i])
    finally:
        _SHARED = None
    return results


def _run_ray(fn, shared, items, address, done) -> list:
    try:
        import ray
    except ImportError:
        raise JobsError("--ray needs Ray: pip install 'kvtui[ray]' (or pip install ray)") from None
    started_here = not ray.is_initialized()
    if started_here:
        # the cluster's workers import kvtui as installed there (pip install 'kvtui[ray]'); a local one
        # ("local": started for this run) runs from here
        ray.init(address=address, log_to_driver=False)
    try:
        remote = ray.remote(fn)
        shared_ref = ray.put(shared)
        refs = [remote.remote(shared_ref, item) for item in items]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list = [None] * len(items)
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                i = index[ref]
                results[i] = ray.get(ref)
                if done is not None:
                    done(i, results[i])
        return results
    finally:
        if started_here:
            ray.shutdown()
