"""Our engine's prefix cache as vLLM KV events: the same wire a router (or `kvtui attach`) reads from vLLM.

A listener on the engine's trace turns the prefix tree's facts into vLLM >= 0.24 events (tagged msgpack maps in
an array batch `[ts, events, data_parallel_rank]`):

  radix_insert   -> BlockStored(block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium="GPU",
                    lora_name): the node's full blocks, chained on the last block of its parent node
  block_evicted  -> BlockRemoved([hash], medium="GPU"): one hash per event, as vLLM does
  (radix_split only renames nodes: nothing is published; partly filled tail blocks are not published either,
  as vLLM publishes whole blocks only)

Hashes are the tree's own chained keys (engine/core/hashing.py, 64 bits) as u64. Batches go out once per engine step
on a PUB socket (3 frames: topic, 8-byte big-endian sequence number from 0, payload) with an optional ROUTER
replay endpoint keeping the last `buffer_steps` batches, answered as vLLM >= 0.26 does. Unlike vLLM, the PUB
socket always binds the endpoint given (tcp://127.0.0.1:5557 listens on loopback); `kvtui attach` connects.
pyzmq and msgspec are imported only when a publisher is made.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque

from engine.core.hashing import chain_hash, root_hash

END_SEQ = b"\xff" * 8


class KvEventPublisher:
    def __init__(
        self,
        endpoint: str,
        replay: str | None = None,
        topic: str = "",
        rank: int = 0,
        buffer_steps: int = 10_000,
    ):
        import msgspec
        import zmq

        self._encode = msgspec.msgpack.Encoder().encode
        self.ctx = zmq.Context.instance()
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 500)
        self.pub.set_hwm(100_000)
        self.pub.bind(endpoint)
        self.endpoint = self.pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.router = None
        self.replay = None
        if replay:
            self.router = self.ctx.socket(zmq.ROUTER)
            self.router.setsockopt(zmq.LINGER, 0)
            self.router.bind(replay)
            self.replay = self.router.getsockopt_string(zmq.LAST_ENDPOINT)
        self.topic = topic.encode()
        self.rank = rank
        self.buffer: deque = deque(maxlen=buffer_steps)
        self.seq = 0
        # batches sent
        self.published = 0
        # node id -> [(u64 key, content)] of its blocks
        self._nodes: dict[int, list[tuple[int, str]]] = {0: []}
        self._pending: list[dict] = []
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._t0 = time.time()
        self._thread = threading.Thread(target=self._serve, name="kvtui-publish", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the engine's thread: a trace listener
    def __call__(self, event: dict) -> None:
        etype = event["type"]
        if etype == "radix_insert":
            self._stored(event)
        elif etype == "radix_split":
            blocks = self._nodes.get(event["node_id"], [])
            self._nodes[event["new_node_id"]] = blocks[event["at"] :]
            self._nodes[event["node_id"]] = blocks[: event["at"]]
        elif etype == "block_evicted" and not event["hash"].startswith("tail:"):
            blocks = self._nodes.get(event.get("node_id"))
            if blocks:
                blocks.pop()
            self._pending.append(
                {"type": "BlockRemoved", "block_hashes": [int(event["hash"], 16)], "medium": "GPU"}
            )
        elif etype == "radix_evict":
            self._nodes.pop(event["node_id"], None)
        elif etype == "step":
            self.flush()

    def _stored(self, event: dict) -> None:
        tokens, n = event["token_ids"], len(event["blocks"])
        if not n:
            return
        size = len(tokens) // n
        parent_blocks = self._nodes.get(event["parent_id"]) or []
        parent_key, parent_content = parent_blocks[-1] if parent_blocks else (None, root_hash())
        keys = event.get("hashes")
        blocks = []
        content = parent_content
        # contents chain as the tree's do; keys from the event when it carries them
        for i in range(n):
            content = chain_hash(content, tokens[i * size : (i + 1) * size])
            blocks.append((int(keys[i], 16) if keys else int(content, 16), content))
        self._nodes[event["node_id"]] = blocks
        self._pending.append(
            {
                "type": "BlockStored",
                "block_hashes": [k for k, _ in blocks],
                "parent_block_hash": parent_key,
                "token_ids": list(tokens),
                "block_size": size,
                "lora_id": None,
                "medium": "GPU",
                "lora_name": None,
            }
        )

    def flush(self) -> None:
        """Send what the last step did as one batch (vLLM publishes once per scheduler step)."""
        if self._pending:
            batch, self._pending = self._pending, []
            self._queue.put(self._encode([time.time(), batch, self.rank]))

    # ------------------------------------------------------------------ the publisher's thread: sockets
    def _serve(self) -> None:
        while True:
            try:
                payload = self._queue.get(timeout=0.02)
            except queue.Empty:
                payload = None
            if payload is not None:
                seq = self.seq.to_bytes(8, "big")
                self.pub.send_multipart((self.topic, seq, payload))
                self.buffer.append((self.seq, payload))
                self.seq += 1
                self.published += 1
            if self.router is not None and self.router.poll(0):
                self._answer_replay()
            if payload is None and self._stop.is_set():
                break
        self.pub.close()
        if self.router is not None:
            self.router.close(0)

    def _answer_replay(self) -> None:
        frames = self.router.recv_multipart()
        if len(frames) != 3:
            return
        client, _, start = frames
        first = int.from_bytes(start, "big")
        for seq, payload in list(self.buffer):
            if seq >= first:
                self.router.send_multipart((client, b"", self.topic, seq.to_bytes(8, "big"), payload))
        self.router.send_multipart((client, b"", b"", END_SEQ, b""))

    def close(self, timeout: float = 5.0) -> None:
        """Send what is pending, then stop (the queue is drained before the sockets close)."""
        self.flush()
        self._stop.set()
        self._thread.join(timeout)


def parse_publish(text: str) -> dict:
    """`tcp://HOST:PORT[,replay=tcp://HOST:PORT][,topic=T][,rank=N]` -> KvEventPublisher keyword arguments."""
    parts = [p.strip() for p in text.split(",")]
    if not parts[0].startswith("tcp://"):
        raise ValueError(f"--publish {text!r}: give tcp://HOST:PORT (e.g. tcp://127.0.0.1:5557)")
    out: dict = {"endpoint": parts[0]}
    for part in parts[1:]:
        key, sep, value = part.partition("=")
        if not sep or key not in ("replay", "topic", "rank") or not value:
            raise ValueError(f"--publish {text!r}: option {part!r} is not replay=, topic= or rank=")
        if key == "rank" and not value.isdigit():
            raise ValueError(f"--publish {text!r}: rank= must be a number")
        out[key] = int(value) if key == "rank" else value
    return out
