"""Workload files: requests with an arrival step, run headless through the engine (for `kvtui record`).

Format (JSON):
    {"name": "...", "description": "...",
     "engine": {"block_size": 16, "num_blocks": 64, ...},          # optional EngineConfig overrides
     "requests": [
        {"id": "alice", "arrival_step": 0,
         "prompt": "text"  |  "messages": [{"role": "user", "content": "..."}]  |  "prompt_token_ids": [...],
         "sampling": {"max_tokens": 32, "temperature": 0.0, ...},   # SamplingParams fields
         "cache_salt": null, "phase": "cold"}, ...],                # phase: a label `kvtui stats` groups by
     "edits": [{"at_step": 12, "request_id": "alice", "position": 40 | "end", "kind": "replace",
                "text": " blue" | "token_ids": [...] | "count": 2,
                "after_finish": false}]}   # applied before that step runs (and once the request finished)
A position "end" is the end of the sequence at the time of the edit: an insert there appends (a new chat turn).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

from engine.core.request import RequestOutput, SamplingParams
from engine.trace.compressed import CompressedFileError, open_binary

PROMPT_KEYS = ("prompt", "messages", "prompt_token_ids")


class WorkloadError(ValueError):
    pass


@dataclass
class WorkloadRequest:
    request_id: str
    arrival_step: int
    prompt: object
    sampling: SamplingParams
    cache_salt: str | None = None
    phase: str | None = None


@dataclass
class WorkloadEdit:
    at_step: int
    request_id: str
    position: int
    kind: str
    # text, token ids, or a count (delete)
    tokens: object
    after_finish: bool = False


@dataclass
class Workload:
    name: str
    description: str
    engine: dict
    requests: list[WorkloadRequest] = field(default_factory=list)
    edits: list[WorkloadEdit] = field(default_factory=list)


def load_workload(path: str | Path) -> Workload:
    path = Path(path)
    try:
        # one JSON document, read whole (decompressed first where it is zstd: compressed.py)
        with open_binary(path) as handle:
            data = json.loads(handle.read().decode("utf-8"))
    except FileNotFoundError:
        raise WorkloadError(f"no such workload file: {path}") from None
    except CompressedFileError as exc:
        raise WorkloadError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise WorkloadError(
            f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at byte {exc.start + 1}): "
            "a workload is a JSON file"
        ) from None
    except json.JSONDecodeError as exc:
        raise WorkloadError(
            f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("requests"), list) or not data["requests"]:
        raise WorkloadError(f"{path}: expected an object with a non-empty list 'requests'")
    allowed = {f.name for f in fields(SamplingParams)}
    requests = []
    for index, item in enumerate(data["requests"]):
        where = f"{path}: requests[{index}]"
        if not isinstance(item, dict):
            raise WorkloadError(f"{where}: a request is an object, got {item!r}")
        given = [key for key in PROMPT_KEYS if key in item]
        if len(given) != 1:
            raise WorkloadError(f"{where}: give exactly one of {', '.join(PROMPT_KEYS)}")
        unknown = set(item.get("sampling", {})) - allowed
        if unknown:
            raise WorkloadError(
                f"{where}: unknown sampling fields {sorted(unknown)}; known: {sorted(allowed)}"
            )
        try:
            sampling = SamplingParams(**item.get("sampling", {}))
        except (TypeError, ValueError) as exc:
            raise WorkloadError(f"{where}: {exc}") from None
        problem = _prompt_problem(given[0], item[given[0]])
        if problem or not isinstance(item.get("arrival_step", 0), int):
            raise WorkloadError(f"{where}: {problem or 'arrival_step must be a whole number'}")
        requests.append(
            WorkloadRequest(
                request_id=str(item.get("id", f"r{index}")),
                arrival_step=int(item.get("arrival_step", 0)),
                prompt=item[given[0]],
                sampling=sampling,
                cache_salt=item.get("cache_salt"),
                phase=item.get("phase"),
            )
        )
    ids = [r.request_id for r in requests]
    if len(set(ids)) != len(ids):
        raise WorkloadError(f"{path}: request ids must be unique")
    edits = []
    for index, item in enumerate(data.get("edits", [])):
        where = f"{path}: edits[{index}]"
        given = [key for key in ("text", "token_ids", "count") if key in item]
        if len(given) != 1 or item.get("request_id") not in ids or "position" not in item:
            raise WorkloadError(
                f"{where}: needs request_id (one of the requests), position, and exactly one "
                "of text, token_ids, count"
            )
        position = item["position"] if item["position"] == "end" else int(item["position"])
        edits.append(
            WorkloadEdit(
                int(item.get("at_step", 0)),
                item["request_id"],
                position,
                item.get("kind", "replace"),
                item[given[0]],
                bool(item.get("after_finish")),
            )
        )
    return Workload(
        str(data.get("name", path.stem)),
        str(data.get("description", "")),
        data.get("engine", {}),
        sorted(requests, key=lambda r: r.arrival_step),
        sorted(edits, key=lambda e: e.at_step),
    )


def _prompt_problem(key: str, value) -> str | None:
    if key == "prompt" and not isinstance(value, str):
        return "prompt must be text"
    if key == "messages" and not (
        isinstance(value, list)
        and value
        and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in value)
    ):
        return 'messages must be a non-empty list of {"role": ..., "content": ...}'
    if key == "prompt_token_ids" and not (
        isinstance(value, list)
        and value
        and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
    ):
        return "prompt_token_ids must be a non-empty list of integers"
    return None


def run_workload(
    engine, workload: Workload, on_finished: Callable[[RequestOutput], None] | None = None
) -> list[RequestOutput]:
    """Submit each request at its arrival step and step the engine until every request has finished."""
    pending = list(workload.requests)
    edits = list(workload.edits)
    outputs: dict[str, RequestOutput] = {}
    step = 0
    while pending or edits or engine.has_unfinished():
        while pending and pending[0].arrival_step <= step:
            item = pending.pop(0)
            engine.submit(
                item.prompt,
                item.sampling,
                cache_salt=item.cache_salt,
                request_id=item.request_id,
                phase=item.phase,
            )
        while edits and _edit_due(engine, edits[0], step):
            edit = edits.pop(0)
            request = engine.requests[edit.request_id]
            position = request.num_tokens if edit.position == "end" else edit.position
            engine.edit(edit.request_id, position, edit.tokens, edit.kind)
        for out in engine.step():
            outputs[out.request_id] = out
            if on_finished is not None:
                on_finished(out)
        step += 1
    return [outputs[r.request_id] for r in workload.requests]


def _edit_due(engine, edit: WorkloadEdit, step: int) -> bool:
    request = engine.requests.get(edit.request_id)
    if request is None or edit.at_step > step:
        return False
    return not edit.after_finish or request.finish_reason is not None
