"""The workload the real-vLLM tests drive, and a raw recorder of the wire.

Requests go one at a time, so the change in `vllm:prefix_cache_hits_total` around each one is that request's
hit tokens (vLLM's own figure). Prompts are token ids (the completions API takes them), built from SmolLM2's
chat template: a shared system prompt, a multi-turn chat, the same prompt with one early token changed, two
cache salts, long documents that fill the 128-block pool and evict, and a block-aligned prompt sent twice (a
second physical copy of one hash, each copy removed on its own).
"""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass

import msgspec
import zmq

from kvtui.sources.prometheus import summarize

SYSTEM = (
    "<|im_start|>system\nYou are a careful assistant for a team of engineers who run large language model "
    "inference servers. You answer in short plain sentences, you never invent numbers, and when a question "
    "is about caches you name the block size, the pool size and the eviction policy before anything else. "
    "Keep every answer under fifty words.<|im_end|>\n"
)
QUESTIONS = [
    "What is a KV cache?",
    "Why does prefix caching help a chat server?",
    "What does a block size of 32 mean?",
]


def user_turn(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def document(i: int, words: int = 600, nonce: str = "") -> str:
    """About 1,450 tokens (45 blocks of 32): three fill most of the 128-block pool."""
    body = " ".join(f"record {i}-{k} holds value {(k * 7919 + i) % 1000}." for k in range(words // 5))
    return f"<|im_start|>user\n{nonce}Summarise document {i}: {body}<|im_end|>\n<|im_start|>assistant\n"


def system(nonce: str = "") -> str:
    """The shared system prompt; a nonce makes it new to a server that already cached the plain one."""
    return SYSTEM.replace("You are", f"{nonce}You are", 1) if nonce else SYSTEM


@dataclass
class Sent:
    name: str
    prompt_token_ids: list
    salt: str | None
    # vLLM's own figures around the request
    hit_tokens: int
    query_tokens: int
    cached_tokens: int | None
    output_token_ids: list


def _counters(server) -> tuple[float, float]:
    # vLLM labels its samples engine="0": every rank summed
    ranks = summarize(server.metrics_text()).values()
    return sum(f.get("prefix_hits", 0.0) for f in ranks), sum(f.get("prefix_queries", 0.0) for f in ranks)


def completion_body(ids: list[int], max_tokens: int) -> dict:
    """A greedy completion on token ids that returns its ids."""
    return {
        "model": "smollm2",
        "prompt": ids,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "return_token_ids": True,
    }


def send(
    server, name: str, ids: list[int], salt: str | None = None, max_tokens: int = 2, extra: dict | None = None
) -> Sent:
    """One completion on token ids (`extra`: more of the body); vLLM's hit and queried tokens from /metrics
    around it."""
    hits0, queries0 = _counters(server)
    body = completion_body(ids, max_tokens)
    if salt is not None:
        body["cache_salt"] = salt
    body.update(extra or {})
    reply = server.post("/v1/completions", body)
    # the counters are updated when the engine core reports; give it a moment
    deadline = time.monotonic() + 5
    while True:
        hits1, queries1 = _counters(server)
        if queries1 > queries0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    usage = reply.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    choice = reply["choices"][0]
    return Sent(
        name,
        ids,
        salt,
        int(hits1 - hits0),
        int(queries1 - queries0),
        details.get("cached_tokens"),
        choice.get("token_ids") or [],
    )


def workload(server, tokenizer, nonce: str = "") -> list[Sent]:
    """The scripted run (about a minute on two cores). Returns every request with vLLM's figures."""
    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    out = []
    for i, q in enumerate(QUESTIONS):
        out.append(send(server, f"system+q{i}", enc(system(nonce) + user_turn(q))))
    # a multi-turn chat: turn 2 carries turn 1 and its answer
    turn1 = enc(system(nonce) + user_turn(QUESTIONS[0]))
    first = send(server, "chat-turn1", turn1, max_tokens=8)
    out.append(first)
    turn2 = turn1 + first.output_token_ids + enc("<|im_end|>\n" + user_turn("And how big is it for SmolLM2?"))
    out.append(send(server, "chat-turn2", turn2))
    # one early token changed (position 5): nothing after it can hit
    changed = list(turn1)
    changed[5] = changed[5] + 1
    out.append(send(server, "early-token-changed", changed))
    # two cache salts: the same prompt cached apart under each
    for salt in ("tenant-a", "tenant-b"):
        out.append(send(server, f"salt-{salt}-first", turn1, salt=salt))
        out.append(send(server, f"salt-{salt}-again", turn1, salt=salt))
    return out


def evict(server, tokenizer, count: int = 4, nonce: str = "") -> list[Sent]:
    """Long documents (about 45 blocks each): the 128-block pool evicts."""
    return [
        send(server, f"document-{i}", tokenizer.encode(document(i, nonce=nonce), add_special_tokens=False))
        for i in range(count)
    ]


def second_copy(server, tokenizer, nonce: str, copies, send=None) -> list[Sent]:
    """A second physical copy of one hash, made and removed on the real wire.

    vLLM never serves a prompt's last token from its cache, so a block-aligned prompt sent again hits all
    blocks but the last, recomputes that one into a block of its own, and caches it under the same hash (vLLM
    does not de-duplicate: v1/core/block_pool.py, NOTE #1): a second BlockStored of a hash already resident,
    whose parent is the hit chain's last block. A document sent between the two puts its ~46 blocks between
    the copies in the LRU free queue, so later documents evict the copies apart, each with a BlockRemoved of
    its own. Once one copy is gone, the prompt plus a few tokens asks vLLM whether the hash is still cached
    (it hits all 3 blocks); documents follow until the other copy is gone too, and the probe is asked again.

    `copies()` says how many physical copies of the twice-stored hash the wire holds now (0 before the second
    store); `send` is the sender (a test's, which explains each request at its arrival)."""
    send = send or globals()["send"]
    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    question = "Which block is cached twice, and which of its two copies goes first when the pool is full?"
    # three whole blocks, cut from a longer prompt
    aligned = enc(system(nonce + "Twice. ") + user_turn(question))[: 3 * 32]
    assert len(aligned) == 96, len(aligned)
    probe = aligned + enc("And why?")
    out = [send(server, "aligned-first", aligned)]
    out.append(send(server, "copy-document-0", enc(document(0, nonce=nonce + "Copy. "))))
    out.append(send(server, "aligned-again", aligned))
    assert copies() == 2, f"the block-aligned prompt sent twice left {copies()} copies of its last block"
    probed = False
    for i in range(1, 9):
        out.append(send(server, f"copy-document-{i}", enc(document(i, nonce=nonce + "Copy. "))))
        if copies() == 1 and not probed:
            out.append(send(server, "aligned-probe-one-copy", probe))
            probed = True
        if copies() == 0:
            break
    out.append(send(server, "aligned-probe-no-copy", probe))
    return out


def wire_events(lines, seen: set | None = None):
    """The events of recorded lines (live frames and replay replies), each batch once, decoded with plain
    msgspec (not kvtui's decoder), as the dicts vLLM's map layout makes."""
    seen = set() if seen is None else seen
    for line in lines:
        if line["kind"] not in ("live", "replay"):
            continue
        frames = [base64.b64decode(f) for f in line["frames"]]
        # live: topic, seq, payload; replay: [empty,] [topic,] seq, payload (or the end marker)
        seq, payload = frames[-2:]
        if line["kind"] == "replay" and seq == b"\xff" * 8:
            continue
        if seq in seen:
            continue
        seen.add(seq)
        yield from msgspec.msgpack.decode(payload)[1]


class WireBlocks:
    """Physical blocks held, counted from raw frames with plain msgspec (not kvtui's decoder): each hash of a
    BlockStored is one block, each hash of a BlockRemoved frees one. Sound where no request asks for
    kv_cache_report_mode=full (whose re-reports are no new blocks): `rereport_like` counts the stores that
    look like one (a chain from the root, every hash already held), which a second copy of a one-block prompt
    also does."""

    def __init__(self):
        self.held: dict[int, int] = {}
        self.seen: set[bytes] = set()
        # hashes that were ever held twice at once
        self.doubled: set[int] = set()
        self.stored = self.removed = self.rereport_like = 0

    def feed(self, lines) -> WireBlocks:
        for e in wire_events(lines, self.seen):
            hashes = e.get("block_hashes", ())
            if e["type"] == "BlockStored":
                held = self.held
                if e["parent_block_hash"] is None and all(held.get(h) for h in hashes):
                    self.rereport_like += 1
                for h in hashes:
                    held[h] = held.get(h, 0) + 1
                    if held[h] > 1:
                        self.doubled.add(h)
                self.stored += len(hashes)
            elif e["type"] == "BlockRemoved":
                for h in hashes:
                    # a removal of a block stored before the first frame: nothing to count
                    if self.held.get(h):
                        self.held[h] -= 1
                        if not self.held[h]:
                            del self.held[h]
                self.removed += len(hashes)
        return self

    @property
    def physical(self) -> int:
        return sum(self.held.values())


def copies_counter(recorder):
    """For second_copy: the physical copies the wire holds now of the hashes first held twice from now on."""
    recorder.settle()
    before = WireBlocks().feed(recorder.lines).doubled

    def copies() -> int:
        recorder.settle()
        wire = WireBlocks().feed(recorder.lines)
        return sum(wire.held.get(h, 0) for h in wire.doubled - before)

    return copies


class RawRecorder:
    """Every live frame of a publisher (and, on request, its replay replies), as they came, base64."""

    def __init__(self, endpoint: str, topic: str = ""):
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.setsockopt(zmq.SUBSCRIBE, topic.encode())
        self.sock.connect(endpoint)
        self.lines: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while not self._stop.is_set():
            if poller.poll(50):
                frames = self.sock.recv_multipart()
                self.lines.append({"kind": "live", "frames": [base64.b64encode(f).decode() for f in frames]})

    def settle(self, quiet: float = 0.5, timeout: float = 10.0) -> None:
        """Until no frame came for `quiet` seconds (the server publishes at the end of each step)."""
        deadline = time.monotonic() + timeout
        count, since = len(self.lines), time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - since < quiet:
            time.sleep(0.05)
            if len(self.lines) != count:
                count, since = len(self.lines), time.monotonic()

    def mark(self, name: str, salt: str | None) -> None:
        """A request is about to be sent: the frames before this line are what it meets."""
        self.settle()
        self.lines.append({"kind": "arrival", "name": name, "salt": salt})

    def replay(self, endpoint: str, start: int = 0, timeout: float = 3.0) -> None:
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.connect(endpoint)
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        while dealer.poll(int(timeout * 1000)):
            frames = dealer.recv_multipart()
            self.lines.append(
                {"kind": "replay", "start": start, "frames": [base64.b64encode(f).decode() for f in frames]}
            )
            if len(frames) >= 2 and frames[-2] == b"\xff" * 8:
                break
        dealer.close(linger=0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close(linger=0)

    def write(self, path, requests: list[Sent], metrics: str | None = None) -> None:
        with open(path, "w") as f:
            for line in self.lines:
                f.write(json.dumps(line) + "\n")
            for r in requests:
                f.write(json.dumps({"kind": "request", **r.__dict__}) + "\n")
            if metrics is not None:
                f.write(json.dumps({"kind": "metrics", "text": metrics}) + "\n")
