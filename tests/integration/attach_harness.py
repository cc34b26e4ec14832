"""What the real-vLLM tests (test_real_vllm.py) attach with and count against: an attacher folding into a
`FleetState` as `kvtui attach --headless` does, and the blocks stored and removed decoded from the raw frames
with plain msgspec (not kvtui's decoder)."""

from __future__ import annotations

import base64
import threading
import time

import msgspec

from engine.trace import TraceSink
from kvtui.sources.attach import Attacher
from kvtui.sources.endpoints import parse_source
from kvtui.state.fleet import FleetState
from kvtui.state.fleet_explain import explain_prompt

# vLLM's block size in the server tests/integration/vllm_server.py starts
BLOCK = 32


class Attached:
    """An attacher folding into a FleetState (as `kvtui attach --headless` does), and its notices."""

    def __init__(self, text: str, bind: bool = False):
        self.sink = TraceSink()
        self.fleet = FleetState({})
        self.lock = threading.Lock()
        self.sink.batch_listeners.append(self._fold)
        self.source = parse_source(text, bind=bind)
        self.attacher = Attacher([self.source], self.sink, replay_timeout=5.0, metrics_every=0.5)
        self.attacher.start()
        assert self.attacher.ready.wait(30)
        self.last = time.monotonic()

    def _fold(self, events):
        with self.lock:
            self.fleet.apply_all(events)
            self.last = time.monotonic()

    def settle(self, quiet: float = 0.4, timeout: float = 10) -> None:
        """Until no event came for `quiet` seconds (the server publishes at the end of each step)."""
        # at least `quiet` from now: a request's events may arrive just after its answer
        start = time.monotonic()
        deadline = start + timeout
        while time.monotonic() < deadline and time.monotonic() - max(self.last, start) < quiet:
            time.sleep(0.05)

    def explain(self, ids, **options) -> dict:
        with self.lock:
            results = explain_prompt(self.fleet, ids, **options)
        if not results:
            # nothing published yet: no worker, nothing cached
            return {
                "matched_tokens": 0,
                "prompt_tokens": len(ids),
                "block_size": BLOCK,
                "message": "no worker",
            }
        return max(results, key=lambda r: r["matched_tokens"])

    def worker(self):
        (worker,) = self.fleet.workers.values()
        return worker

    def stop(self):
        self.attacher.stop()


def independent_counts(lines) -> tuple[int, int]:
    """Block hashes stored and removed, decoded from the raw frames (the replay answer at the start, then the live
    stream; each batch once) with plain msgspec, not kvtui's decoder."""
    stored = removed = 0
    seen = set()
    for line in lines:
        frames = [base64.b64decode(f) for f in line["frames"]]
        if line["kind"] == "replay":
            frames = frames[1:]
            frames = frames[1:] if len(frames) == 3 else frames
            if frames[0] == b"\xff" * 8:
                continue
        else:
            frames = frames[1:]
        seq, payload = frames
        if seq in seen:
            continue
        seen.add(seq)
        ts, events, *_ = msgspec.msgpack.decode(payload)
        for e in events:
            tag = e["type"] if isinstance(e, dict) else e[0]
            hashes = e["block_hashes"] if isinstance(e, dict) else e[1]
            stored += len(hashes) if tag == "BlockStored" else 0
            removed += len(hashes) if tag == "BlockRemoved" else 0
    return stored, removed
