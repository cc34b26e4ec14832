"""A Mooncake-shaped workload: multi-turn chats under shared system prompts, in the Mooncake JSONL format.

    write_jsonl(mooncake_like(seed=0), "mooncake_12k.jsonl")
    python -m kvtui.whatif.synth mooncake_12k.jsonl [--seed 0] [--requests 12031]
    python -m kvtui.whatif.synth big.kvblk --references 100000000     streamed (synth_stream.py)

Each line: {"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]}, one id per
512-token block, the last block partial; ids are consecutive integers in order of first use, and equal leading
ids are a shared prefix (as in the FAST'25 release, kvcache-ai/Mooncake FAST25-release/traces).

The published figures it is shaped after (the conversation trace, the one of about 12k requests):
- 12,031 requests over one hour (timestamps 0 to 3,600,000 ms; the dataset card of the released traces);
- about 12k input tokens and a few hundred output tokens per request on average (the FAST'25 paper's trace
  table: 12,035 and 343 for the conversation trace);
- every request of that trace starts with the same id (a system prompt block shared by all), and the rest is
  mostly unique per request except where a conversation's next turn extends the previous one.

The generator: sessions start uniformly over the hour and run a geometric number of turns with exponential
gaps. A session opens with an application prompt (Zipf popularity over a few dozen, each a whole number of
shared blocks after the global one) and a first user message (log-normal, long-tailed); each later turn's
prompt is the previous prompt, the previous answer and a new message, so its ids repeat the previous turn's
full blocks and add new ones (the previous turn's partial last block changes, so it gets a new id). A prompt
past 128k tokens starts the conversation over. These are stated choices, not fitted to the trace; what matters
for the curve is the reuse structure (shared heads, turns reusing their predecessor after a gap of minutes, a
long tail of one-off documents). Deterministic for a seed.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from kvtui.whatif.synth_config import MooncakeLikeConfig, _lognormal

__all__ = ["MooncakeLikeConfig", "mooncake_like", "write_jsonl"]


@dataclass
class _Session:
    app: int
    ids: list[int] = field(default_factory=list)
    input_length: int = 0
    output_length: int = 0


def mooncake_like(seed: int = 0, config: MooncakeLikeConfig | None = None) -> list[dict]:
    """The workload's records, sorted by timestamp (ties in generation order)."""
    cfg = config or MooncakeLikeConfig()
    rng = random.Random(seed)
    # turn times first: sessions until the hour holds exactly `requests` turns
    turns: list[tuple[int, int, int]] = []
    sessions = 0
    stop_p = 1.0 / cfg.mean_turns
    while len(turns) < cfg.requests:
        at = rng.uniform(0, cfg.duration_ms)
        turn = 0
        while at < cfg.duration_ms and len(turns) < cfg.requests:
            turns.append((int(at), sessions, turn))
            turn += 1
            if rng.random() < stop_p:
                break
            at += rng.expovariate(1.0 / (cfg.mean_gap_s * 1000.0))
        sessions += 1
    turns.sort()
    weights = [1.0 / (rank + 1) ** cfg.app_zipf for rank in range(cfg.apps)]
    next_id = 0

    def fresh(count: int) -> list[int]:
        nonlocal next_id
        out = list(range(next_id, next_id + count))
        next_id += count
        return out

    global_ids = fresh(cfg.global_prompt_blocks)
    app_ids: dict[int, list[int]] = {}
    app_len = [rng.randint(*cfg.app_blocks) for _ in range(cfg.apps)]
    live: dict[int, _Session] = {}
    records: list[dict] = []
    block = cfg.block_size
    for at, sid, _turn in turns:
        session = live.get(sid)
        if session is not None:
            prompt = session.input_length + session.output_length + _lognormal(rng, cfg.next_message)
            keep = session.input_length // block
            if prompt > cfg.max_prompt_tokens:
                # the context is full: the user starts over (a new conversation under the same app)
                session = None
        if session is None:
            app = rng.choices(range(cfg.apps), weights)[0]
            if app not in app_ids:
                app_ids[app] = fresh(app_len[app])
            head = global_ids + app_ids[app]
            session = live[sid] = _Session(app=app, ids=list(head))
            prompt = len(head) * block + _lognormal(rng, cfg.first_message)
            prompt = min(prompt, cfg.max_prompt_tokens)
            keep = len(head)
        blocks = -(-prompt // block)
        ids = session.ids[:keep] + fresh(blocks - keep)
        output = min(cfg.max_output, _lognormal(rng, cfg.output))
        session.ids, session.input_length, session.output_length = ids, prompt, output
        records.append({"timestamp": at, "input_length": prompt, "output_length": output, "hash_ids": ids})
    return records


def write_jsonl(records: list[dict], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        for record in records:
            handle.write(json.dumps(record, separators=(", ", ": ")) + "\n")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write a Mooncake-shaped workload (JSONL or a block trace).")
    parser.add_argument("path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--requests", type=int, default=MooncakeLikeConfig.requests)
    parser.add_argument(
        "--references",
        type=int,
        help="Stream this many hash ids (10^8, 10^9) to the file as they are made (synth_stream.py).",
    )
    parser.add_argument(
        "--format",
        dest="fmt",
        choices=("jsonl", "blocks"),
        help="With --references: Mooncake JSONL or kvtui's binary block trace [blocks for a .kvblk path].",
    )
    args = parser.parse_args(argv)
    if args.references is not None:
        return _stream(args)
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    records = mooncake_like(args.seed, MooncakeLikeConfig(requests=args.requests))
    write_jsonl(records, args.path)
    prompt = sum(r["input_length"] for r in records)
    output = sum(r["output_length"] for r in records)
    print(
        f"{args.path}: {len(records)} requests, {prompt / len(records):,.0f} prompt and "
        f"{output / len(records):,.0f} output tokens on average"
    )


def _stream(args) -> None:
    from kvtui.whatif.synth_stream import write_stream

    if args.references < 1:
        raise SystemExit("--references must be at least 1")
    fmt = args.fmt or ("blocks" if str(args.path).endswith(".kvblk") else "jsonl")
    requests, ids, prompt = write_stream(args.path, args.references, args.seed, fmt)
    print(
        f"{args.path}: {requests:,} requests, {ids:,} hash ids ({fmt}), "
        f"{prompt / max(requests, 1):,.0f} prompt tokens on average"
    )


if __name__ == "__main__":
    main()
