"""The Mooncake-shaped workload of synth.py at any size, made a request at a time and written as it is made:
10^8 or 10^9 block references never sit in memory.

    python -m kvtui.whatif.synth big.kvblk --references 100000000 [--seed 0]      a block trace
    python -m kvtui.whatif.synth big.jsonl --references 1000000 --format jsonl    Mooncake JSONL

The same sessions, apps, message sizes and turns as `mooncake_like` (synth.py's config), at its rate of
requests an hour, for as many hours as the references take: sessions start as a Poisson process and each
one's next turn waits on a heap, so memory holds only the sessions still talking. It is not the same random
sequence as `mooncake_like` for a seed (that one draws every turn's time first), only the same process.
"""

from __future__ import annotations

import heapq
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from kvtui.whatif.synth_config import MooncakeLikeConfig, _lognormal


@dataclass
class _Talk:
    app: int
    ids: list[int]
    input_length: int = 0
    output_length: int = 0


def stream_mooncake_like(
    references: int, seed: int = 0, config: MooncakeLikeConfig | None = None
) -> Iterator[tuple[int, int, int, list[int]]]:
    """(timestamp ms, input_length, output_length, hash_ids) in arrival order, until `references` hash ids."""
    cfg = config or MooncakeLikeConfig()
    rng = random.Random(seed)
    block = cfg.block_size
    stop_p = 1.0 / cfg.mean_turns
    session_rate = cfg.requests / cfg.duration_ms / cfg.mean_turns
    gap_rate = 1.0 / (cfg.mean_gap_s * 1000.0)
    weights = [1.0 / (rank + 1) ** cfg.app_zipf for rank in range(cfg.apps)]
    app_len = [rng.randint(*cfg.app_blocks) for _ in range(cfg.apps)]
    next_id = cfg.global_prompt_blocks
    global_ids = list(range(cfg.global_prompt_blocks))
    app_ids: dict[int, list[int]] = {}
    # (time of the next turn, session)
    waiting: list[tuple[float, int]] = []
    talks: dict[int, _Talk | None] = {}
    sessions, made = 0, 0
    next_start = rng.expovariate(session_rate)
    while made < references:
        if not waiting or next_start <= waiting[0][0]:
            at, sid = next_start, sessions
            sessions += 1
            talks[sid] = None
            next_start += rng.expovariate(session_rate)
        else:
            at, sid = heapq.heappop(waiting)
        talk = talks[sid]
        if talk is not None:
            prompt = talk.input_length + talk.output_length + _lognormal(rng, cfg.next_message)
            keep = talk.input_length // block
            if prompt > cfg.max_prompt_tokens:
                talk = None
        if talk is None:
            app = rng.choices(range(cfg.apps), weights)[0]
            if app not in app_ids:
                app_ids[app] = list(range(next_id, next_id + app_len[app]))
                next_id += app_len[app]
            head = global_ids + app_ids[app]
            talk = _Talk(app, list(head))
            prompt = min(len(head) * block + _lognormal(rng, cfg.first_message), cfg.max_prompt_tokens)
            keep = len(head)
        blocks = -(-prompt // block)
        ids = talk.ids[:keep] + list(range(next_id, next_id + blocks - keep))
        next_id += blocks - keep
        output = min(cfg.max_output, _lognormal(rng, cfg.output))
        talk.ids, talk.input_length, talk.output_length = ids, prompt, output
        made += len(ids)
        yield int(at), prompt, output, ids
        if rng.random() < stop_p:
            del talks[sid]
        else:
            talks[sid] = talk
            heapq.heappush(waiting, (at + rng.expovariate(gap_rate), sid))


def write_stream(path: str, references: int, seed: int, fmt: str, config: MooncakeLikeConfig | None = None):
    """Write the workload as it is made: (requests, hash ids, prompt tokens)."""
    requests = ids_written = prompt_tokens = 0
    records = stream_mooncake_like(references, seed, config)
    block = (config or MooncakeLikeConfig()).block_size
    if fmt == "blocks":
        from kvtui.whatif.block_trace import BlockTraceWriter

        with BlockTraceWriter(path, block) as writer:
            for at, prompt, output, ids in records:
                writer.add(at, prompt, output, ids)
                requests, ids_written, prompt_tokens = (
                    requests + 1,
                    ids_written + len(ids),
                    prompt_tokens + prompt,
                )
    else:
        with open(path, "w") as handle:
            for at, prompt, output, ids in records:
                record = {"timestamp": at, "input_length": prompt, "output_length": output, "hash_ids": ids}
                handle.write(json.dumps(record, separators=(", ", ": ")) + "\n")
                requests, ids_written, prompt_tokens = (
                    requests + 1,
                    ids_written + len(ids),
                    prompt_tokens + prompt,
                )
    return requests, ids_written, prompt_tokens


def hours(requests: int, config: MooncakeLikeConfig | None = None) -> float:
    """How many hours of arrivals that many requests span at the config's rate."""
    cfg = config or MooncakeLikeConfig()
    return requests / cfg.requests * cfg.duration_ms / 3.6e6 if cfg.requests else math.inf
