"""Our engine's prefix cache as vLLM KV events: the same wire a router (or `kvtui attach`) reads from vLLM.

A listener on the engine's trace turns the cache's facts into vLLM >= 0.24 events (tagged msgpack maps in an
array batch `[ts, events, data_parallel_rank]`), each naming its KV-cache group as vLLM 0.32 does:

  radix_insert   -> BlockStored(block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium="GPU",
                    lora_name, group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window): the node's full
                    blocks, chained on the last block of its parent node
  block_stored   -> BlockStored of a window group's blocks (window_layout="paged"): they are in that group's
                    hash map now, found by their hash; token ids and parent are the tree's for that hash, and a
                    run of blocks one request stores in a row is one event, as vLLM sends it
  block_evicted  -> BlockRemoved([hash], medium="GPU", group_idx): the block left its group's hash map (the
                    tree's or a window group's); one hash per event, as vLLM does
  (radix_split only renames nodes; block_cached and block_freed move blocks to the free list and leave the
  hash maps as they are: nothing is published; partly filled tail blocks are not published either, as vLLM
  publishes whole blocks only)

Groups are the trace header's `kv_groups`, in vLLM's group order, and `group_idx` is the index there: under
window_layout="paged" the tree's blocks go out under `table_group` (the first full-attention group), each
window group's under its own index with kind "sliding_window" and its window. A model with no full-attention
layer has a table group of kind "index" that holds no K/V; vLLM has no such group, so the tree's blocks are
not published and its window groups' are. With the ring layout (no `kv_groups`) the cache is one group:
group_idx 0, kind "full_attention", as vLLM sends for a model of full-attention layers. The publisher is
given the header as an event (`publisher(trace.header)`) before the engine's first step. Where vLLM's store
of a window group that keeps only some blocks carries the token ids of the blocks it skipped as well, a store
here carries each kept run's own, so a reader places every block.

Hashes are the tree's own chained keys (engine/core/hashing.py, 64 bits) as u64; a window group's block has the
key of the tree's block at that position. Batches go out once per engine step on a PUB socket (3 frames:
topic, 8-byte big-endian sequence number from 0, payload) with an optional ROUTER replay endpoint keeping the
last `buffer_steps` batches, answered as vLLM >= 0.26 does. Unlike vLLM, the PUB socket always binds the
endpoint given (tcp://127.0.0.1:5557 listens on loopback); `kvtui attach` connects.
pyzmq and msgspec are imported only when a publisher is made.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque

from engine.core.hashing import chain_hash, root_hash
from engine.models.kv_groups import FULL, INDEX, SLIDING

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
        # the header's groups: (kind, window) per vLLM group index, and the one the tree holds
        self._groups: list[tuple[str, int | None]] = [(FULL, None)]
        self._table = 0
        self._block_size = 0
        # node id -> u64 keys of its blocks; key -> (parent key, content, token ids) of each block in the tree
        self._nodes: dict[int, list[int]] = {0: []}
        self._blocks: dict[int, tuple[int | None, str, list[int]]] = {}
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
            self._tree_stored(event)
        elif etype == "block_stored":
            self._group_stored(event)
        elif etype == "radix_split":
            keys = self._nodes.get(event["node_id"], [])
            self._nodes[event["new_node_id"]] = keys[event["at"] :]
            self._nodes[event["node_id"]] = keys[: event["at"]]
        elif etype == "block_evicted" and not event["hash"].startswith("tail:"):
            self._evicted(event)
        elif etype == "radix_evict":
            self._nodes.pop(event["node_id"], None)
        elif etype == "step":
            self.flush()
        elif etype == "header":
            self._header(event)

    def _header(self, header: dict) -> None:
        """The engine's groups (`kv_groups`, `table_group`; none: one full-attention group)."""
        groups = header.get("kv_groups")
        if groups:
            self._groups = [(g["kind"], g.get("window")) for g in groups]
            self._table = header.get("table_group", 0)
        self._block_size = header.get("block_size", 0)

    def _spec(self, group: int) -> dict:
        """vLLM 0.32's group fields of a BlockStored (the window left out where there is none)."""
        kind, window = self._groups[group] if group < len(self._groups) else (None, None)
        out = {"group_idx": group, "kv_cache_spec_kind": kind}
        if kind == SLIDING and window is not None:
            out["kv_cache_spec_sliding_window"] = window
        return out

    def _published(self, group: int) -> bool:
        """vLLM has the group: all but a table group of kind "index" (no K/V)."""
        return group >= len(self._groups) or self._groups[group][0] != INDEX

    def _tree_stored(self, event: dict) -> None:
        tokens, n = event["token_ids"], len(event["blocks"])
        if not n:
            return
        size = len(tokens) // n
        parent_keys = self._nodes.get(event["parent_id"]) or []
        parent_key = parent_keys[-1] if parent_keys else None
        content = self._blocks.get(parent_key, (None, root_hash(), []))[1]
        keys = event.get("hashes")
        node, parent = [], parent_key
        # contents chain as the tree's do; keys from the event when it carries them
        for i in range(n):
            block = tokens[i * size : (i + 1) * size]
            content = chain_hash(content, block)
            key = int(keys[i], 16) if keys else int(content, 16)
            self._blocks[key] = (parent, content, block)
            node.append(key)
            parent = key
        self._nodes[event["node_id"]] = node
        if self._published(self._table):
            self._pending.append(self._stored(list(node), parent_key, list(tokens), size, self._table))

    def _group_stored(self, event: dict) -> None:
        """A window group's block entered its hash map: one more block of the last event when that event is
        the same group's run ending at this block's parent, else a new event."""
        group, key = event["group"], int(event["hash"], 16)
        if not self._published(group):
            return
        parent, _, tokens = self._blocks.get(key, (None, "", []))
        last = self._pending[-1] if self._pending else None
        if (
            last is not None
            and last["type"] == "BlockStored"
            and last["group_idx"] == group
            and parent is not None
            and last["block_hashes"][-1] == parent
            and tokens
            and len(last["token_ids"]) == last["block_size"] * len(last["block_hashes"])
        ):
            last["block_hashes"].append(key)
            last["token_ids"] += tokens
            return
        size = len(tokens) or self._block_size
        self._pending.append(self._stored([key], parent, list(tokens), size, group))

    def _stored(self, keys: list[int], parent: int | None, tokens: list[int], size: int, group: int) -> dict:
        return {
            "type": "BlockStored",
            "block_hashes": keys,
            "parent_block_hash": parent,
            "token_ids": tokens,
            "block_size": size,
            "lora_id": None,
            "medium": "GPU",
            "lora_name": None,
            **self._spec(group),
        }

    def _evicted(self, event: dict) -> None:
        """A block left its group's hash map: the tree's (its node loses its last block) or a window group's."""
        key = int(event["hash"], 16)
        group = event.get("group", self._table)
        if group == self._table:
            keys = self._nodes.get(event.get("node_id"))
            if keys:
                keys.pop()
            self._blocks.pop(key, None)
        if self._published(group):
            self._pending.append(
                {"type": "BlockRemoved", "block_hashes": [key], "medium": "GPU", "group_idx": group}
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
