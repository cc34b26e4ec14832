"""`kvtui sinks --trace OUT`: the experiment's caches as a kvtui trace, so `kvtui replay OUT` shows their rings.

Three requests, one per cache of budget W, advance through the text side by side:
    window          ring_write: W slots, slot = position mod W (what the engine's rings write)
    sinks           ring_write with sink_tokens = S: S sink slots kept forever, then a ring of W - S slots
    heavy-hitters   ring_kept: what H2O keeps in one layer's KV head 0 (W slots: W - W/2 recent keys and the
                    W/2 keys with the most attention so far); the set changes as keys earn attention
Each sample is one `step` of `every` positions: a prefill_chunk per request, each ring's event, then the step.
A long text is sampled (`every` = ceil(n / 256) by default) so the trace stays small: a ring_kept event carries
W positions. Timestamps are nominal (t = position / 1000 s) and steps last 0 s: the experiment scores each mode
in one pass, with no clock per position. The header is the sinks mode's engine's (W - S window slots and S sink
slots a layer: the budget every mode shares), with kind "sinks" and the experiment's settings.
"""

from __future__ import annotations

import math

from engine.trace.writer import TraceSink, TraceWriter

# the most samples a trace holds by default
MAX_SAMPLES = 256
WINDOW, SINKS, HEAVY = "window", "sinks", "heavy-hitters"


def default_every(n: int) -> int:
    """Positions per sample: every one up to MAX_SAMPLES tokens, then as many as keep MAX_SAMPLES samples."""
    return max(1, math.ceil(n / MAX_SAMPLES))


def sample_ends(n: int, every: int) -> list[int]:
    """One past the newest position of each sample: every, 2 * every, ..., and n itself."""
    return [*range(every, n, every), n]


def query_positions(n: int, every: int) -> list[int]:
    """The query whose cache each sample shows (the newest token): what H2O records (`trace_at`)."""
    return [end - 1 for end in sample_ends(n, every)]


def event(etype: str, t: float, **fields) -> dict:
    """An event as the engine's TraceSink lays it out (seq first; numbered when written)."""
    return {"seq": 0, "t": t, "type": etype, **fields}


def ring_write(request_id: str, window: int, sinks: int, start: int, end: int, t: float) -> dict:
    """The engine's ring_write for a chunk [start, end) (engine/core/rings.py: the same evicted positions)."""
    before = range(max(sinks, start - window), start)
    evicted = [p for p in before if p < max(sinks, end - window)]
    return event(
        "ring_write",
        t,
        request_id=request_id,
        group=0,
        window=window,
        start=start,
        end=end,
        evicted=evicted,
        sink_tokens=sinks,
    )


def sinks_trace(
    header: dict, token_ids: list[int], texts: list[str], window: int, sinks: int, run, every: int
) -> tuple[dict, list[dict]]:
    """(header, events) of the experiment's three caches; `run` is the HeavyHitterRun recorded at
    `query_positions(len(token_ids), every)` (None: no heavy-hitters request)."""
    n = len(token_ids)
    header = dict(header)
    header["kind"] = "sinks"
    header["sinks"] = dict(
        window=window,
        sink_tokens=sinks,
        heavy=run.heavy if run else None,
        recent=run.recent if run else None,
        layer=run.trace_layer if run else None,
        every=every,
        tokens=n,
    )
    modes = [(WINDOW, window, 0), (SINKS, window - sinks, sinks)] + ([(HEAVY, 0, 0)] if run else [])
    events: list[dict] = []
    for rid, _, _ in modes:
        events.append(
            event(
                "request_arrived",
                0.0,
                request_id=rid,
                prompt_token_ids=list(token_ids),
                prompt_texts=list(texts),
                max_tokens=0,
            )
        )
        events.append(event("request_scheduled", 0.0, request_id=rid, num_computed=0))
    start = 0
    for step, end in enumerate(sample_ends(n, every)):
        t = round(end / 1000, 6)
        for rid, ring_window, ring_sinks in modes:
            events.append(event("prefill_chunk", t, request_id=rid, step=step, start=start, end=end))
            if rid == HEAVY:
                kept = run.history[end - 1]
                events.append(
                    event(
                        "ring_kept",
                        t,
                        request_id=rid,
                        group=0,
                        budget=run.budget,
                        recent=run.recent,
                        end=end,
                        kept=kept,
                        layer=run.trace_layer,
                        kv_head=0,
                    )
                )
            else:
                events.append(ring_write(rid, ring_window, ring_sinks, start, end, t))
        events.append(
            event(
                "step",
                t,
                step=step,
                num_tokens=(end - start) * len(modes),
                num_prefill=len(modes),
                num_decode=0,
                duration=0.0,
                free_blocks=int(header.get("num_blocks") or 0),
            )
        )
        start = end
    # every text is scored to its end: the requests finish (tab 2 would read "running" for ever otherwise)
    t = round(n / 1000, 6)
    for rid, _, _ in modes:
        events.append(
            event(
                "request_finished",
                t,
                request_id=rid,
                reason="length",
                num_prompt_tokens=n,
                num_output_tokens=0,
                cached_tokens=0,
                ttft=None,
                tpot=None,
            )
        )
    return header, events


def write_trace(path: str, header: dict, events: list[dict]) -> None:
    """Number the events and write them as a trace file (the engine's writer: one format)."""
    sink = TraceSink()
    sink.add_writer(TraceWriter(path))
    sink.set_header({k: v for k, v in header.items() if k not in ("type", "schema")})
    sink.emit_events(events)
    sink.close()
