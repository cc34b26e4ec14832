"""The server's KV-event stream kept beside the proxy's request log (`kvtui proxy --log LOG --attach ...`).

vLLM publishes one batch of KV events at the end of an engine step that stored or removed blocks, stamped with
the engine's wall-clock time. The proxy already folds that stream into its view of the cache; here every
batch is also written, one JSON line each, to the events file beside the log (`events_path`):

    {"ts": engine seconds (wall clock), "t": wall-clock seconds the proxy got it, "worker": "vllm",
     "seq": the publisher's sequence number,
     "stored": [{"hashes": [hex...], "parent": hex | null, "tokens": [ids...], "salt": str | null}, ...],
     "removed": [hex...], "cleared": true (only when the batch cleared the whole cache)}

`kvtui whatif LOG` reads it back (kvtui/whatif/step_clock.py) to replay the log on the server's steps. A long
run stays bounded: past `max_bytes` the file is moved to `<events>.1` (replacing an older one) and a new one
starts, so at most twice `max_bytes` is kept; a replay reads the two in order.
"""

from __future__ import annotations

import json
import os
import threading
import time

from engine.trace.attach_structs import KvBlockRemoved, KvBlockStored, hash_hex

# the events file's size before it is rotated (bytes)
MAX_BYTES = 256 << 20


def events_path(log_path: str) -> str:
    """The events file beside a request log: `requests.jsonl` -> `requests.events.jsonl`."""
    stem, ext = os.path.splitext(log_path)
    return f"{stem}.events{ext or '.jsonl'}"


def batch_line(events, received: float) -> dict | None:
    """One published batch as the events file keeps it; None for a run of events that is no KV batch."""
    stored, removed, cleared = [], [], False
    head = None
    for e in events:
        cls = type(e)
        if cls is KvBlockStored:
            item = {
                "hashes": [hash_hex(h) for h in e.hashes],
                "parent": None if e.parent is None else hash_hex(e.parent),
                "tokens": e.token_ids,
            }
            if e.salt is not None:
                item["salt"] = e.salt
            if e.group:
                item["group"] = e.group
            if e.medium not in (None, "GPU"):
                item["medium"] = e.medium
            stored.append(item)
            head = head or e
        elif cls is KvBlockRemoved:
            if e.medium in (None, "GPU"):
                removed.extend(hash_hex(h) for h in e.hashes)
            head = head or e
        elif isinstance(e, dict) and e.get("type") == "kv_all_cleared":
            cleared = True
    if head is None and not cleared:
        return None
    line = {
        "ts": head.engine_ts if head is not None else received,
        "t": round(received, 6),
        "worker": head.worker if head is not None else "",
        "seq": head.wire_seq if head is not None else None,
        "stored": stored,
        "removed": removed,
    }
    if cleared:
        line["cleared"] = True
    return line


class EventsLog:
    """Appends each published batch to `path` (a batch listener of the attach sink, called on the attach
    thread), rotating past `max_bytes`."""

    def __init__(self, path: str, max_bytes: int = MAX_BYTES):
        self.path = path
        self.max_bytes = max_bytes
        self.batches = 0
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8")

    def write(self, events) -> None:
        line = batch_line(events, time.time())
        if line is None:
            return
        text = json.dumps(line, separators=(",", ":")) + "\n"
        with self._lock:
            if self._file.closed:
                return
            if self._file.tell() + len(text) > self.max_bytes and self._file.tell():
                self._file.close()
                os.replace(self.path, self.path + ".1")
                self._file = open(self.path, "a", encoding="utf-8")
            self._file.write(text)
            self._file.flush()
            self.batches += 1

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_events(path: str) -> list[dict]:
    """The batches of an events file (its rotated part first), in the order they were published; a torn last
    line (a proxy stopped mid-write) is left out."""
    out = []
    for part in (path + ".1", path):
        try:
            with open(part, encoding="utf-8") as f:
                for line in f:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        continue
        except OSError:
            continue
    return out


def events_beside(log_path, t0: float = 0.0) -> list[dict] | None:
    """The batches kept beside a request log, their `ts` made relative to `t0` (the log's first request);
    None when there are none."""
    batches = read_events(events_path(str(log_path)))
    return [{**b, "ts": b["ts"] - t0} for b in batches] or None
