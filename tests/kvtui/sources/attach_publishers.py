"""Publishers byte-compatible with vLLM >= 0.24 (map events; media GPU, CPU, STORAGE), vLLM <= 0.23 (array
events) and SGLang 0.5.23 (signed hashes, token pairs, HiCache's media): msgspec structs declared here as the
released engines declare them, and a PUB + ROUTER publisher that numbers batches and answers replay requests as
theirs do. Test helpers, not product code.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import deque
from typing import Any

import msgspec
import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)


# --- vLLM >= 0.24: map events, array batch --------------------------------------------------------------------
class VBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class VEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class VBlockStored(VEvent, tag="BlockStored"):
    block_hashes: list[bytes | int]
    parent_block_hash: bytes | int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class VBlockRemoved(VEvent, tag="BlockRemoved"):
    block_hashes: list[bytes | int]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class VAllBlocksCleared(VEvent, tag="AllBlocksCleared"):
    pass


# --- vLLM <= 0.23: array events ---------------------------------------------------------------------------------
class OldEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


class OldBlockStored(OldEvent, tag="BlockStored"):
    block_hashes: list[bytes | int]
    parent_block_hash: bytes | int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class OldBlockRemoved(OldEvent, tag="BlockRemoved"):
    block_hashes: list[bytes | int]
    medium: str | None
    group_idx: int | None = None


# --- SGLang 0.5.23: map events, signed int64 hashes, token pairs with EAGLE -------------------------------------
class SBatch(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list[Any]
    attn_dp_rank: int | None = None


class SEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class SBlockStored(SEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[Any]
    block_size: int
    lora_id: int | None
    medium: str | None = None
    cache_salt: str | None = None
    session_id: str | None = None
    lora_name: str | None = None


class SBlockRemoved(SEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: str | None = None


class SAllBlocksCleared(SEvent, tag="AllBlocksCleared"):
    pass


class SStorageMedium(str, enum.Enum):
    """SGLang's StorageMedium: the `medium` its HiCache tiers record (GPU, then host, disk, a shared pool)."""

    GPU = "GPU"
    CPU = "CPU_PINNED"
    DISK = "DISK"
    EXTERNAL = "EXTERNAL"


def v_placeholder(
    block_hash: int, medium: str, group: int = 0, locality=None, ownership=None
) -> VBlockStored:
    """vLLM's offloading connector's store of a chunk it has no metadata for (OffloadingEventsTracker's
    placeholder, its default without self_describing_kv_events): the hash alone, no tokens, block size 0."""
    return VBlockStored(
        block_hashes=[block_hash],
        parent_block_hash=None,
        token_ids=[],
        lora_id=None,
        block_size=0,
        medium=medium,
        lora_name=None,
        group_idx=group,
        locality=locality,
        ownership=ownership,
    )


class Publisher:
    """PUB socket + replay ROUTER with a buffer of past batches, like both engines' ZmqEventPublisher.
    `old_replay`: replies without the topic frame (vLLM <= 0.25)."""

    def __init__(
        self,
        endpoint: str,
        replay: str | None = None,
        topic: str = "",
        buffer_steps: int = 10_000,
        old_replay: bool = False,
        bind: bool = True,
    ):
        self.ctx = zmq.Context.instance()
        # XPUB: a PUB on the wire that also tells when a subscriber has joined (tests wait for that)
        self.pub = self.ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.set_hwm(100_000)
        (self.pub.bind if bind else self.pub.connect)(endpoint)
        self.endpoint = self.pub.getsockopt_string(zmq.LAST_ENDPOINT) if bind else endpoint
        self.router = None
        self.replay = None
        if replay:
            self.router = self.ctx.socket(zmq.ROUTER)
            self.router.setsockopt(zmq.LINGER, 0)
            self.router.bind(replay)
            self.replay = self.router.getsockopt_string(zmq.LAST_ENDPOINT)
        self.topic = topic.encode()
        self.buffer: deque = deque(maxlen=buffer_steps)
        self.seq = 0
        self.old_replay = old_replay
        self.encoder = msgspec.msgpack.Encoder()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        if self.router is not None:
            self._thread.start()

    def publish(self, batch, send: bool = True) -> int:
        """Number, buffer and (unless `send` is False: a message the subscriber misses) send one batch."""
        payload = self.encoder.encode(batch)
        with self._lock:
            seq = self.seq
            self.seq += 1
            self.buffer.append((seq, payload))
            if send:
                self.pub.send_multipart((self.topic, seq.to_bytes(8, "big"), payload))
        return seq

    def wait_subscribed(self, timeout: float = 20.0) -> None:
        if not self.pub.poll(int(timeout * 1000)):
            raise TimeoutError("no subscriber joined")
        self.pub.recv()

    def send_raw(self, frames) -> None:
        self.pub.send_multipart(frames)

    def restart(self) -> None:
        with self._lock:
            self.seq = 0
            self.buffer.clear()

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self.router.poll(20):
                continue
            client, _, start = self.router.recv_multipart()
            start = int.from_bytes(start, "big")
            with self._lock:
                items = [(s, p) for s, p in self.buffer if s >= start]
            for s, p in items:
                frames = (
                    (client, b"", s.to_bytes(8, "big"), p)
                    if self.old_replay
                    else (client, b"", self.topic, s.to_bytes(8, "big"), p)
                )
                self.router.send_multipart(frames)
            self.router.send_multipart(
                (client, b"", END_SEQ, b"") if self.old_replay else (client, b"", b"", END_SEQ, b"")
            )

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)
        self.pub.close(0)
        if self.router is not None:
            self.router.close(0)


def wait_for(predicate, timeout: float = 20.0, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()
