"""Helpers for the reducer tests: a small pool header and a builder of valid events."""

from __future__ import annotations

from engine.trace import validate_event

HEADER = {
    "type": "header",
    "schema": 1,
    "model": {},
    "block_size": 4,
    "num_blocks": 8,
    "bytes_per_block": 64,
    "bytes_per_token": 16,
    "config": {},
}


class Events:
    """Builds valid events with increasing seq/t."""

    def __init__(self):
        self.out: list[dict] = []

    def __call__(self, etype: str, **fields) -> dict:
        ev = {"seq": len(self.out), "t": 0.01 * len(self.out), "type": etype, **fields}
        assert validate_event(ev) is None, validate_event(ev)
        self.out.append(ev)
        return ev


def arrive(e: Events, rid: str, ids: list[int]) -> None:
    e(
        "request_arrived",
        request_id=rid,
        prompt_token_ids=ids,
        prompt_texts=[f"t{i}" for i in ids],
        max_tokens=4,
        cache_salt=None,
        parent_id=None,
    )
