"""A kvtui engine trace run again as the engine ran it, through the engine core with no model.

The trace's header gives the settings (model shape, block size, pool, batching, eviction, partial hits); its
events give what happened between steps: arrivals, edits, forks and aborts, each at the step boundary it came
before, and every token each request produced (`token_emitted`, in order). Parallel samples (n > 1) are told from
forks by where their arrival sits: inside a step (after its chunks, before its `step` event). A request that
ended with "eos" or "stop" ends on the same token again.

The core then makes the engine's own decisions, so every prefix lookup finds what the engine's found: the twin's
accuracy on our own traces is exact, and `compare` says so request by request (`kvtui whatif --as-recorded`).
Torch-free.
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
from engine.trace.writer import TraceSink

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
    # (request id, matched tokens) of each first lookup, in order
    lookups: list[tuple[str, int]] = field(default_factory=list)


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
        elif kind == "request_arrived":
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
        elif kind == "request_finished":
            if event["reason"] == "aborted":
                recorded.actions.append((step, "abort", event))
            elif event["reason"] in ("eos", "stop"):
                last = recorded.tokens[event["request_id"]][-1]
                if event["reason"] == "eos":
                    recorded.eos_ids.add(last)
                else:
                    recorded.stop_ids[event["request_id"]].add(last)
        elif kind == "prefix_match" and not event["detail"].get("readmission"):
            recorded.lookups.append((event["request_id"], event["matched_tokens"]))
    return recorded


def replay(recorded: Recorded) -> list[tuple[str, int]]:
    """Run the recorded trace through the engine core; (request id, matched tokens) of each first lookup."""
    header = recorded.header
    model = dict(header["model"])
    model["windows"] = tuple(model["windows"])
    shape = ModelShape(**model)
    settings = {k: v for k, v in header["config"].items() if k in CONFIG_FIELDS}
    config = EngineConfig(**{**settings, "num_blocks": header["num_blocks"]})
    sink = TraceSink()
    lookups: list[tuple[str, int]] = []
    sink.listeners.append(
        lambda e: (
            e["type"] == "prefix_match"
            and not e["detail"].get("readmission")
            and lookups.append((e["request_id"], e["matched_tokens"]))
        )
    )
    core = EngineCore(shape, config, sink, eos_ids=frozenset(recorded.eos_ids))
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
    lookups: int
    equal: int
    # (request id, the engine's matched tokens, the replay's), for each lookup that differs
    differ: list[tuple[str, int, int]]


def compare(path: str | Path) -> AsRecorded:
    """Each first lookup of the trace against the replay's."""
    recorded = read_recorded(path)
    ours = replay(recorded)
    differ = [
        (rid, theirs, mine) for (rid, theirs), (_, mine) in zip(recorded.lookups, ours) if theirs != mine
    ]
    missing = len(recorded.lookups) - len(ours)
    equal = min(len(recorded.lookups), len(ours)) - len(differ)
    if missing:
        differ.append(("(lookups)", len(recorded.lookups), len(ours)))
    return AsRecorded(len(recorded.lookups), equal, differ)
