"""A kvtui engine trace run again as the engine ran it, through the engine core with no model.

The trace's header gives the settings (model shape, block size, pool, batching, eviction, partial hits); its
events give what happened between steps: arrivals, edits, forks and aborts, each at the step boundary it came
before, and every token each request produced (`token_emitted`, in order). Parallel samples (n > 1) are told from
forks by where their arrival sits: inside a step (after its chunks, before its `step` event). A request that
ended with "eos" or "stop" ends on the same token again.

The core then makes the engine's own decisions, so every prefix lookup finds what the engine's found: the twin's
accuracy on our own traces is exact, and `compare` says so lookup by lookup (`kvtui whatif --as-recorded`): each
request's lookup at admission and every lookup again (a readmission after a preemption, or after an edit of a
finished request). `replay` can write the run as a trace of its own (`-o`), with the recorded tokens' texts and
each step at the recorded step's time. Torch-free.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

from engine.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.core.request import SamplingParams
from engine.models.shape import ModelShape
from engine.trace.writer import TraceSink, TraceWriter

CONFIG_FIELDS = {f.name for f in dataclasses.fields(EngineConfig)}


@dataclass
class Recorded:
    header: dict
    # (step boundary, kind, event): kind is submit, edit, fork or abort
    actions: list[tuple[int, str, dict]] = field(default_factory=list)
    tokens: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    # parallel samples per request (SamplingParams.n - 1)
    samples: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    eos_ids: set[int] = field(default_factory=set)
    stop_ids: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    # every prefix lookup, in order: (request id, matched tokens, a lookup again rather than the first)
    lookups: list[tuple[str, int, bool]] = field(default_factory=list)
    # the recorded text of each token id (the re-run trace carries the same texts)
    texts: dict[int, str] = field(default_factory=dict)
    # the time of each recorded step (the re-run trace's clock)
    step_times: list[float] = field(default_factory=list)


def read_recorded(path: str | Path) -> Recorded:
    from engine.trace.opening import open_trace

    trace = open_trace(path)
    if trace.header.get("kind") == "whatif" or "block_size" not in trace.header.get("config", {}):
        raise ValueError(f"{path}: not a trace of kvtui's engine (its header has no engine config)")
    recorded = Recorded(trace.header)
    step, in_step = 0, False
    # samples spawned per (request, step): a request spawns its n - 1 again after an edit of its prompt
    spawned: dict[tuple[str, int], int] = defaultdict(int)
    for event in trace.events:
        kind = event["type"]
        if kind in ("prefill_chunk", "decode"):
            in_step = True
        elif kind == "step":
            step, in_step = event["step"] + 1, False
            recorded.step_times.append(event["t"])
        elif kind == "request_arrived":
            recorded.texts.update(zip(event["prompt_token_ids"], event.get("prompt_texts") or ()))
            parent = event.get("parent_id")
            if parent is None:
                recorded.actions.append((step, "submit", event))
            elif in_step:
                spawned[(parent, step)] += 1
                recorded.samples[parent] = max(recorded.samples[parent], spawned[(parent, step)])
            else:
                recorded.actions.append((step, "fork", event))
        elif kind == "edit":
            recorded.actions.append((step, "edit", event))
        elif kind == "token_emitted":
            recorded.tokens[event["request_id"]].append(event["token_id"])
            if "text" in event:
                recorded.texts[event["token_id"]] = event["text"]
        elif kind == "request_finished":
            if event["reason"] == "aborted":
                recorded.actions.append((step, "abort", event))
            elif event["reason"] in ("eos", "stop"):
                last = recorded.tokens[event["request_id"]][-1]
                if event["reason"] == "eos":
                    recorded.eos_ids.add(last)
                else:
                    recorded.stop_ids[event["request_id"]].add(last)
        elif kind == "prefix_match":
            recorded.lookups.append(_lookup(event))
    return recorded


def _lookup(event: dict) -> tuple[str, int, bool]:
    return event["request_id"], event["matched_tokens"], bool((event["detail"] or {}).get("readmission"))


def replay(recorded: Recorded, trace_path: str | Path | None = None) -> list[tuple[str, int, bool]]:
    """Run the recorded trace through the engine core: every prefix lookup (request id, matched tokens, again).
    With `trace_path` the run is written as a trace (the recorded header, texts and step times)."""
    header = recorded.header
    model = dict(header["model"])
    model["windows"] = tuple(model["windows"])
    shape = ModelShape(**model)
    settings = {k: v for k, v in header["config"].items() if k in CONFIG_FIELDS}
    # a paged trace whose config names no retention_interval was recorded keeping every window block
    if settings.get("window_layout") == "paged":
        settings.setdefault("retention_interval", None)
    config = EngineConfig(**{**settings, "num_blocks": header["num_blocks"]})
    times = recorded.step_times
    core: EngineCore | None = None

    def clock() -> float:
        # the recorded time of the last step run (0 before the first); past the recorded steps (a re-run at
        # other settings may take more), a recorded step's mean length each
        done = core.num_steps if core is not None else 0
        if not done or not times:
            return 0.0
        extra = max(0, done - len(times))
        return times[min(done, len(times)) - 1] + extra * times[-1] / len(times)

    sink = TraceSink(clock=clock)
    if trace_path is not None:
        sink.add_writer(TraceWriter(trace_path))
        sink.set_header({k: v for k, v in header.items() if k not in ("type", "schema")})
    lookups: list[tuple[str, int, bool]] = []
    sink.listeners.append(lambda e: e["type"] == "prefix_match" and lookups.append(_lookup(e)))
    texts = recorded.texts
    core = EngineCore(
        shape, config, sink, lambda token: texts.get(token, f"<{token}>"), eos_ids=frozenset(recorded.eos_ids)
    )
    queues = {rid: deque(tokens) for rid, tokens in recorded.tokens.items()}
    actions = deque(recorded.actions)
    step = 0
    while actions or core.has_unfinished():
        while actions and actions[0][0] <= step:
            _, kind, event = actions.popleft()
            _apply(core, recorded, kind, event)
        scheduled = core.schedule() if core.has_unfinished() else None
        if scheduled is not None:
            core.update_from_output(scheduled, lambda index, req: queues[req.request_id].popleft())
            core.cache.rings.take_pending()
        step = core.num_steps
        if scheduled is None and not core.has_unfinished() and actions:
            # idle until the next recorded action
            step = actions[0][0]
    sink.close()
    return lookups


def _apply(core: EngineCore, recorded: Recorded, kind: str, event: dict) -> None:
    rid = event["request_id"]
    if kind == "submit":
        params = SamplingParams(
            max_tokens=event["max_tokens"],
            n=1 + recorded.samples.get(rid, 0),
            stop_token_ids=sorted(recorded.stop_ids.get(rid, ())),
        )
        core.add_request(
            list(event["prompt_token_ids"]), params, event.get("cache_salt"), rid, event.get("phase")
        )
    elif kind == "fork":
        core.fork(event["parent_id"], 1)
    elif kind == "edit":
        edit_kind = event["kind"]
        tokens = event["num_deleted"] if edit_kind == "delete" else list(event["token_ids"])
        replaced = event["num_deleted"] if edit_kind == "replace" else None
        core.edit(rid, event["position"], tokens, edit_kind, num_replaced=replaced)
    elif kind == "abort":
        core.abort(rid)


@dataclass
class AsRecorded:
    # every lookup compared: at admission and again
    lookups: int
    equal: int
    # (request id, the engine's matched tokens, the replay's), for each lookup that differs
    differ: list[tuple[str, int, int]]
    # of `lookups`, those made again (a readmission after a preemption or an edit)
    again: int = 0


def compare(path: str | Path, trace_path: str | Path | None = None) -> AsRecorded:
    """Every prefix lookup of the trace against the replay's, in order (with `trace_path`: the replay written)."""
    recorded = read_recorded(path)
    ours = replay(recorded, trace_path)
    theirs = recorded.lookups
    differ = [
        (rid, matched, mine)
        for (rid, matched, again), (my_rid, mine, my_again) in zip(theirs, ours)
        if (rid, matched, again) != (my_rid, mine, my_again)
    ]
    compared = min(len(theirs), len(ours))
    equal = compared - len(differ)
    if len(theirs) != len(ours):
        differ.append(("(lookups)", len(theirs), len(ours)))
    # again: a request's every lookup after its first (a readmission's, or an edit's, which no flag marks)
    again = len(theirs) - len({rid for rid, _, _ in theirs})
    return AsRecorded(len(theirs), equal, differ, again)
