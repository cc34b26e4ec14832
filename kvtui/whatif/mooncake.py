"""Mooncake-format traces (the FAST'25 Kimi release, also read by Dynamo and kvcache-simulator): one JSON object
per line, `timestamp` (ms), `input_length`, `output_length`, `hash_ids`. Each hash id stands for one block of
B = `--trace-block-size` tokens (512 in the release); equal leading ids mean a shared prefix. The last id holds
input_length - (n-1)*B tokens. Token ids are made from the ids on demand (requests.py: a run of B ids that
belongs to each hash id alone), so distinct ids never share a token and never meet real or generated ones.

A bad line is skipped with its line number and why; good lines are kept.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.trace.compressed import open_text
from kvtui.whatif.requests import MAX_HASH_ID, SimRequest, Workload

FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def looks_like_mooncake(obj: dict) -> bool:
    return "hash_ids" in obj and "input_length" in obj


def parse_line(obj, number: int, block: int) -> SimRequest:
    """One request, or ValueError saying what is wrong with the line."""
    if not isinstance(obj, dict):
        raise ValueError("a line is one JSON object")
    missing = [f for f in FIELDS if f not in obj]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    ids, n_in, n_out, ts = obj["hash_ids"], obj["input_length"], obj["output_length"], obj["timestamp"]
    if not isinstance(ids, list) or not ids or not all(type(h) is int and 0 <= h <= MAX_HASH_ID for h in ids):
        raise ValueError("hash_ids must be a non-empty list of non-negative integers")
    if type(n_in) is not int or type(n_out) is not int or n_in < 1 or n_out < 0:
        raise ValueError("input_length must be a positive integer and output_length a non-negative one")
    if not (len(ids) - 1) * block < n_in <= len(ids) * block:
        raise ValueError(
            f"input_length {n_in} does not fit {len(ids)} hash ids of {block} tokens (it must be "
            f"more than {(len(ids) - 1) * block} and at most {len(ids) * block}; "
            "check --trace-block-size)"
        )
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts < 0:
        raise ValueError("timestamp must be a non-negative number of milliseconds")
    rid = str(obj.get("request_id", f"m{number}"))
    return SimRequest(
        rid,
        ts / 1000.0,
        None,
        None,
        max(n_out, 1),
        None,
        hash_ids=ids,
        input_length=n_in,
        trace_block_size=block,
    )


def iter_mooncake(handle, trace_block_size: int, problems: list[str]):
    """The file's good lines as requests, in file order (arrivals as written, in seconds); each bad line goes
    to `problems` with its number and why. Reads a line at a time: `handle` may be any text file."""
    if trace_block_size < 1:
        raise ValueError("--trace-block-size must be at least 1")
    return iter_json_lines(handle, lambda obj, number: parse_line(obj, number, trace_block_size), problems)


def iter_json_lines(handle, parse, problems: list[str]):
    """`parse(obj, line number)` of each good JSON line, in file order; each bad line goes to `problems` with
    its number and why (Mooncake and Qwen-Bailian files alike)."""
    for number, line in enumerate(handle, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"line {number}: not JSON ({exc.msg} at column {exc.colno})")
            continue
        try:
            yield parse(obj, number)
        except ValueError as exc:
            problems.append(f"line {number}: {exc}")


def notes_for(trace_block_size: int) -> list[str]:
    return [
        f"each hash id is {trace_block_size} tokens; generated tokens take pool space while their request "
        "runs but are never cached (their content is unknown, and the next turn's ids already carry it)"
    ]


def load_mooncake(path: str | Path, trace_block_size: int = 512) -> Workload:
    path = Path(path)
    problems: list[str] = []
    with open_text(path) as handle:
        requests = list(iter_mooncake(handle, trace_block_size, problems))
    if not requests:
        raise ValueError(f"{path}: no usable Mooncake line" + (f" ({problems[0]})" if problems else ""))
    requests.sort(key=lambda r: r.arrival)
    t0 = requests[0].arrival
    for r in requests:
        r.arrival -= t0
    return Workload(path.name, "mooncake", requests, problems, notes_for(trace_block_size))
