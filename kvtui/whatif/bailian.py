"""Qwen-Bailian traces (alibaba-edu/qwen-bailian-usagetraces-anon, read by its trace replayer and by LMetric):
one JSON object per line, `chat_id`, `parent_chat_id` (-1 for a first turn), `timestamp` (seconds from the
start), `input_length`, `output_length`, `type`, `turn`, `hash_ids`: one id per 16-token block.

Unlike Mooncake's, those ids are not chained: each block's tokens are hashed on their own (salted SipHash,
then remapped to integers), so the same id turns up after different prefixes, and a block taken by its id
alone would "hit" where the engine, whose keys chain the whole prefix, cannot. Here every id is read in its
place: a block is the same block only with its whole prefix (the prefix tree interns a key under its parent;
the tokens made from ids chain through the engine's hashes). `ChainingCount` says how many hits of an
infinite cache the naive reading would have counted that chaining removes.
"""

from __future__ import annotations

from pathlib import Path

from engine.trace.compressed import open_text
from kvtui.whatif.mooncake import iter_json_lines, parse_line
from kvtui.whatif.requests import Workload

BLOCK = 16
FIELDS = ("chat_id", "timestamp", "input_length", "output_length", "hash_ids")


def looks_like_bailian(obj: dict) -> bool:
    return "hash_ids" in obj and "chat_id" in obj and "input_length" in obj


def parse_bailian(obj, number: int, block: int = BLOCK):
    """One request (its timestamp in seconds), or ValueError saying what is wrong with the line."""
    if not isinstance(obj, dict):
        raise ValueError("a line is one JSON object")
    missing = [f for f in FIELDS if f not in obj]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    ts = obj["timestamp"]
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts < 0:
        raise ValueError("timestamp must be a non-negative number of seconds")
    # the Mooncake reader checks the rest; its timestamps are in ms
    as_mooncake = {**obj, "timestamp": ts * 1000.0, "request_id": f"chat{obj['chat_id']}"}
    request = parse_line(as_mooncake, number, block)
    request.phase = obj.get("type") if isinstance(obj.get("type"), str) else None
    return request


def iter_bailian(handle, block: int, problems: list[str]):
    """The file's good lines as requests, in file order; each bad line goes to `problems`."""
    return iter_json_lines(handle, lambda obj, number: parse_bailian(obj, number, block), problems)


def load_bailian(path: str | Path, block: int = BLOCK) -> Workload:
    path = Path(path)
    problems: list[str] = []
    with open_text(path) as handle:
        requests = list(iter_bailian(handle, block, problems))
    if not requests:
        raise ValueError(f"{path}: no usable Qwen-Bailian line" + (f" ({problems[0]})" if problems else ""))
    requests.sort(key=lambda r: r.arrival)
    t0 = requests[0].arrival
    for r in requests:
        r.arrival -= t0
    count = ChainingCount(block)
    for r in requests:
        count.add(r)
    notes = notes_for(block) + [count.note()]
    return Workload(path.name, "bailian", requests, problems, notes)


def notes_for(block: int) -> list[str]:
    return [
        f"Qwen-Bailian: each hash id is one {block}-token block hashed on its own; read chained, so a block "
        "hits only with its whole prefix; generated tokens take pool space but are never cached"
    ]


class ChainingCount:
    """With an infinite cache, over the blocks that may hit: leading blocks whose id was seen before taken
    alone (naive), and leading blocks whose whole prefix was seen before (chained). A request at a time."""

    def __init__(self, block: int = BLOCK):
        from kvtui.whatif.prefix_nodes import PrefixNodes

        self.block = block
        self.seen_ids: set = set()
        self.nodes = PrefixNodes()
        self.naive = self.chained = self.prompt = 0

    def add(self, request) -> None:
        ids, n = request.hash_ids, request.num_prompt_tokens
        full = ids[: n // self.block]
        limit = min(len(full), max(n - 1, 0) // self.block)
        self.prompt += n
        depth = 0
        while depth < limit and full[depth] in self.seen_ids:
            depth += 1
        self.naive += depth
        before = len(self.nodes)
        chain = self.nodes.intern(full)
        depth = 0
        while depth < limit and chain[depth] < before:
            depth += 1
        self.chained += depth
        self.seen_ids.update(full)

    def note(self) -> str:
        removed = self.naive - self.chained
        share = 100 * removed * self.block / self.prompt if self.prompt else 0.0
        return (
            f"chaining the per-block ids removes {removed:,} of {self.naive:,} naive prefix hits of an "
            f"infinite cache (blocks whose id was seen before, but after another prefix): {share:.2f}% of "
            "prompt tokens"
        )
