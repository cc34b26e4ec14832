"""Token labels for a trace written by `kvtui whatif -o`, whose token ids are made up (kvtui/whatif/requests.py)
and whose texts are those ids as decimals: glued together in a tree node they would read 109951162777610995...

A hash-id (Mooncake) prompt is runs of B ids, one run per hash id h: HASH_BASE + h*B + j for j < B. Its first
token is labelled `#h ` and the others have no text, so a node reads `#0 #1 #2 `. A generated token of unknown
content (FRESH_BASE and up) is `·`; a real token id (a kvtui trace or a proxy log replayed without texts) keeps
its number with a space after it.

B is not in the trace: every run starts at a multiple of B after HASH_BASE, so it is the greatest common divisor
of the run starts, or the trace's block size when that divides it (the default: the trace block size).
"""

from __future__ import annotations

import json
from math import gcd

from engine.trace.compressed import open_text
from kvtui.whatif.requests import FRESH_BASE, HASH_BASE


def label(token_id: int, run: int) -> str:
    if token_id >= FRESH_BASE:
        return "·"
    if token_id >= HASH_BASE:
        offset = token_id - HASH_BASE
        return f"#{offset // run} " if offset % run == 0 else ""
    return f"{token_id} "


def run_starts(prompt: list[int]) -> list[int]:
    """Offsets after HASH_BASE where a hash-id run may start: the first token and every break in the ids."""
    return [
        t - HASH_BASE
        for i, t in enumerate(prompt)
        if HASH_BASE <= t < FRESH_BASE and (i == 0 or prompt[i - 1] != t - 1)
    ]


def run_length(header: dict, prompts) -> int:
    """B, the tokens per hash id, from the run starts of these prompts (see the module's docstring)."""
    divisor = 0
    for prompt in prompts:
        for offset in run_starts(prompt):
            divisor = gcd(divisor, offset)
    block = int(header.get("block_size") or 1)
    return block if divisor == 0 or divisor % block == 0 else divisor


def scan_run_length(path: str, header: dict) -> int:
    """B of a what-if trace file, read from its request_arrived lines only (a line that does not parse is the
    loader's to report: skipped here)."""
    prompts = []
    with open_text(path) as f:
        for line in f:
            if '"request_arrived"' not in line:
                continue
            try:
                ids = json.loads(line).get("prompt_token_ids")
            except (ValueError, AttributeError):
                continue
            if isinstance(ids, list) and all(isinstance(t, int) for t in ids):
                prompts.append(ids)
    return run_length(header, prompts)


def relabel(events: list[dict], run: int) -> list[dict]:
    """The texts of these events made from their token ids (in place); returns the list."""
    for ev in events:
        kind = ev.get("type")
        if kind == "request_arrived":
            ev["prompt_texts"] = [label(t, run) for t in ev["prompt_token_ids"]]
        elif kind == "token_emitted":
            ev["text"] = label(ev["token_id"], run)
        elif kind in ("edit", "radix_insert"):
            ev["texts"] = [label(t, run) for t in ev["token_ids"]]
        elif kind == "prefix_match":
            detail = ev.get("detail") or {}
            for key in ("expected", "actual"):
                if isinstance(detail.get(f"{key}_id"), int):
                    detail[f"{key}_text"] = label(detail[f"{key}_id"], run)
    return events
