"""`Attacher`: subscribes to vLLM / SGLang KV-event publishers and emits normalised attach events.

One thread owns every socket. For each source it connects a SUB socket (or, with --bind, binds one that many
servers connect to), applies each batch in sequence order, and on a gap (or at start, when the source has a
replay endpoint) fetches the missing batches from the publisher's ROUTER with a fresh DEALER: request
`[b"", start_seq]`, replies `[b"", topic, seq, payload]` (vLLM >= 0.26, SGLang) or `[b"", seq, payload]`
(older vLLM), ended by seq 0xff..ff. Restarts (the live sequence going back), gaps replay cannot fill, and
malformed or oversized messages become events (`attach_gap`, `attach_malformed`): counted and shown, never a
crash. Events go to a `TraceSink` (engine/trace/writer.py, torch-free): the reducer folds them (a batch listener: a
message's events at once), the -o file writes them.
The event types are engine/trace/attach_events.py; fetching from replay endpoints is kvtui/sources/attach_replay.py,
polling /metrics kvtui/sources/attach_metrics.py, telling a silent source kvtui/sources/attach_silence.py (mixins
of `Attacher`).

With the UI, all of this runs in a process of its own, the collector (kvtui/sources/collector.py), which also
folds the events; the UI process only draws what the collector sends it. Each event's `t` is when its message
arrived; its `engine_ts` is the publisher's batch timestamp, and the header's `wall_clock` (the wall-clock time
of t=0, `anchored`) lets a reader place a replayed batch when it happened. The -o trace is flushed at least
every FLUSH_EVERY seconds.

A server restart shows on the wire (its sequence starts again at 0) only once the new process publishes; its
/metrics page shows it first (counters that go back, a new process start time), and either clears the
workers of that source.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass

import zmq

from engine.trace.attach_structs import AllBlocksCleared, KvBlockStored
from kvtui.sources.attach_metrics import MetricsPolling
from kvtui.sources.attach_replay import ReplayRecovery
from kvtui.sources.attach_silence import SilenceWatch
from kvtui.sources.endpoints import Source
from kvtui.sources.sequence import DUPLICATE, GAP, RESTART, Stream
from kvtui.sources.wire import Batch, WireError, decode_payload, decode_seq

# messages taken from one socket before the others get a turn
DRAIN_PER_SOCKET = 2000
# seconds between two flushes of the -o trace
FLUSH_EVERY = 0.5


def load_tokenizer(name: str):
    """transformers' AutoTokenizer for `name` (a directory or hub id); ValueError in one line if it cannot."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ValueError(
            '--tokenizer needs transformers: pip install "kvtui[engine]" (or run ./install.sh)'
        ) from None
    files = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    if os.path.isdir(name) and not any(os.path.exists(os.path.join(name, f)) for f in files):
        raise ValueError(
            f"tokenizer {name!r}: a directory without tokenizer.json: give a model directory or hub id"
        )
    try:
        return AutoTokenizer.from_pretrained(name)
    # no such directory, no hub: one line
    except Exception as exc:
        raise ValueError(f"tokenizer {name!r}: {str(exc).splitlines()[0]}") from None


def attach_header(sources, tokenizer: str | None) -> dict:
    """An attach trace's header: the fields every trace has (zero where an attached fleet has no such number)
    plus kind=attach and the sources as given."""
    return {
        "kind": "attach",
        "model": {"name": "attach", "tokenizer": tokenizer},
        "block_size": 0,
        "num_blocks": 0,
        "bytes_per_block": 0,
        "bytes_per_token": 0,
        "config": {"sources": [s.as_dict() for s in sources]},
    }


def anchored(header: dict, sink) -> dict:
    """The header with `wall_clock`: the wall-clock time of the sink's t=0 (engine timestamps are wall-clock)."""
    return {**header, "wall_clock": round(time.time() - sink.now(), 6)}


def stamp(batch: Batch, worker: str, wire_seq: int, t: float, text=None) -> None:
    """What a payload does not say about its events: whose, which batch, when it arrived (and, given `text`,
    each token's text); an AllBlocksCleared becomes its `kv_all_cleared` event."""
    events, ts = batch.events, batch.ts
    for i, event in enumerate(events):
        if type(event) is AllBlocksCleared:
            events[i] = {"seq": 0, "t": t, "type": "kv_all_cleared", "worker": worker, "cause": "cleared"}
            continue
        event.worker = worker
        event.t = t
        event.wire_seq = wire_seq
        event.engine_ts = ts
        if text is not None and type(event) is KvBlockStored:
            event.texts = [text(token) for token in event.token_ids]


@dataclass
class Counters:
    # live messages, and batches fetched from replay endpoints
    messages: int = 0
    replayed: int = 0
    events: int = 0
    blocks: int = 0
    malformed: int = 0
    gaps: int = 0
    lost: int = 0
    restarts: int = 0


class Attacher(MetricsPolling, ReplayRecovery, SilenceWatch):
    def __init__(
        self,
        sources: list[Source],
        sink,
        *,
        tokenizer=None,
        replay_timeout: float = 2.0,
        metrics_every: float = 2.0,
        context: zmq.Context | None = None,
    ):
        self.sources = sources
        self.sink = sink
        # anything with .decode([id]) (optional, --tokenizer)
        self.tokenizer = tokenizer
        self._texts: dict[int, str] = {}
        self.replay_timeout = replay_timeout
        self.metrics_every = metrics_every
        self.ctx = context or zmq.Context.instance()
        self.counters = Counters()
        # (severity, text) for the UI
        self.notices: queue.SimpleQueue = queue.SimpleQueue()
        self._streams: dict[tuple, Stream] = {}
        self._sockets: dict[zmq.Socket, Source] = {}
        self._metrics: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._metrics_thread: threading.Thread | None = None
        # called between messages (the collector answers its UI there)
        self.after_messages: list = []
        # sockets open, first replays done (tests wait for it)
        self.ready = threading.Event()
        # more file descriptors the loop polls (a collector's pipe to its UI)
        self.wake_fds: list[int] = []
        # why the loop could not start (sockets that would not open), else None
        self.failed: str | None = None
        # (source endpoint, rank) -> (prefix queries, process start time) of the last /metrics reading
        self._server_marks: dict[tuple, tuple] = {}
        self._topic_told: set[str] = set()
        # the silence watch's: a monitor per SUB socket, and the endpoints a connection was made at
        self._monitors: dict[zmq.Socket, Source] = {}
        self._peered: set[str] = set()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """The receive loop on a thread of its own, and the /metrics poller."""
        self._thread = threading.Thread(target=self.run, name="kvtui-attach", daemon=True)
        self._thread.start()
        self.start_metrics()

    def start_metrics(self) -> None:
        if any(s.metrics for s in self.sources) and self._metrics_thread is None:
            self._metrics_thread = threading.Thread(
                target=self._poll_metrics, name="kvtui-metrics", daemon=True
            )
            self._metrics_thread.start()

    def stopping(self) -> bool:
        """Whether someone asked the loop to stop (else it ended by itself)."""
        return self._stop.is_set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> None:
        """The receive loop (the attach thread; tests may call it on their own thread)."""
        try:
            self._open()
        except zmq.ZMQError as exc:
            self.failed = f"cannot open the sockets: {exc}"
            self.notices.put(("error", self.failed))
            self._watch_close()
            self.ready.set()
            return
        self._watch_open()
        for source in self.sources:
            if source.replay and not source.bind:
                self._initial_replay(source)
        self._after()
        self.ready.set()
        poller = zmq.Poller()
        for sock in self._sockets:
            poller.register(sock, zmq.POLLIN)
        for fd in self.wake_fds:
            poller.register(fd, zmq.POLLIN)
        flushed = time.monotonic()
        try:
            while not self._stop.is_set():
                ready = dict(poller.poll(50))
                for sock in ready:
                    if sock in self._sockets:
                        self._drain(sock, self._sockets[sock])
                self._emit_metrics()
                self._watch_silence()
                self._after()
                now = time.monotonic()
                if now - flushed >= FLUSH_EVERY:
                    # a -o trace a reader can follow within a second
                    self.sink.flush()
                    flushed = now
        finally:
            self.sink.flush()
            self._watch_close()
            for sock in self._sockets:
                sock.close(linger=0)

    # ------------------------------------------------------------------ sockets
    def _open(self) -> None:
        for source in self.sources:
            sock = self.ctx.socket(zmq.SUB)
            # never drop what arrived while a replay ran
            sock.setsockopt(zmq.RCVHWM, 0)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SUBSCRIBE, source.topic.encode())
            self._watch_socket(sock, source)
            if source.bind:
                sock.bind(source.endpoint)
            else:
                sock.connect(source.endpoint)
            self._sockets[sock] = source

    def _after(self) -> None:
        for callback in self.after_messages:
            callback()

    def _drain(self, sock: zmq.Socket, source: Source) -> None:
        for i in range(DRAIN_PER_SOCKET):
            if i:
                self._after()
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=not source.bind)
            except zmq.Again:
                return
            peer = ""
            if source.bind:
                peer = frames[0].get("Peer-Address") or ""
                frames = [f.bytes for f in frames]
            try:
                self.on_message(source, frames, peer)
            # a message no check foresaw: counted and shown, the stream goes on
            except Exception as exc:
                self._malformed(
                    source, f"could not be applied ({type(exc).__name__}: {exc})", sum(map(len, frames))
                )

    # ------------------------------------------------------------------ one live message
    def on_message(self, source: Source, frames: list[bytes], peer: str = "") -> None:
        self.counters.messages += 1
        if len(frames) != 3:
            return self._malformed(
                source, f"{len(frames)} frames (expected topic, seq, payload)", sum(map(len, frames))
            )
        topic, seq_frame, payload = frames
        try:
            seq = decode_seq(seq_frame)
            batch = decode_payload(payload)
        except WireError as exc:
            return self._malformed(source, str(exc), sum(map(len, frames)))
        stream = self._stream(source, peer, topic)
        kind = stream.tracker.classify(seq, batch.ts)
        if kind == RESTART:
            self._restart(stream, seq)
            kind = stream.tracker.classify(seq)
        stream.tracker.saw_live(seq)
        if kind == DUPLICATE:
            return
        if kind == GAP:
            first = stream.tracker.applied + 1
            self._recover(stream, first, seq, "late_join" if first == 0 else "gap")
        self._apply(stream, seq, batch)

    def _stream(self, source: Source, peer: str, topic: bytes) -> Stream:
        # one connected endpoint is one publisher, whatever topic its messages carry (the replay at start knows
        # only the topic subscribed to, "" for all: keyed by topic, the live stream would replay it all again);
        # on a bound socket, peers and topics tell servers apart
        key = (source.endpoint, peer, topic if source.bind else b"")
        stream = self._streams.get(key)
        if stream is None:
            name = source.name
            if source.bind:
                name = f"{peer or '?'}" + (f"/{topic.decode('utf-8', 'replace')}" if topic else "")
            stream = self._streams[key] = Stream(source, name)
        return stream

    def _malformed(self, source: Source, reason: str, size: int) -> None:
        self.counters.malformed += 1
        self.sink.emit("attach_malformed", source=source.endpoint, reason=reason, size=size)

    def _restart(self, stream: Stream, seq: int) -> None:
        self.counters.restarts += 1
        self.sink.emit(
            "attach_gap",
            source=stream.source.endpoint,
            kind="restart",
            expected=stream.tracker.applied + 1,
            got=seq,
            recovered=0,
            lost=0,
        )
        for worker in stream.workers.values():
            self.sink.emit("kv_all_cleared", worker=worker, cause="restart")
        stream.tracker.restart()
        # the next /metrics reading is the new process's baseline
        for key in [k for k in self._server_marks if k[0] == stream.source.endpoint]:
            del self._server_marks[key]

    # ------------------------------------------------------------------ applying a batch
    def _worker(self, stream: Stream, rank: int | None) -> str:
        worker = stream.workers.get(rank)
        if worker is None:
            source = stream.source
            own = rank is None or rank == (source.dp_rank or 0)
            worker = stream.name if own and len(stream.workers) == 0 else f"{stream.name}#r{rank}"
            stream.workers[rank] = worker
            self.sink.emit(
                "attach_worker",
                worker=worker,
                source=source.endpoint,
                name=stream.name,
                rank=rank,
                replay=source.replay,
                metrics=source.metrics,
                blocks=source.blocks,
            )
        return worker

    def _apply(self, stream: Stream, seq: int, batch: Batch) -> None:
        stream.tracker.mark_applied(seq, batch.ts)
        events = batch.events
        self.counters.events += len(events)
        self.counters.blocks += batch.blocks
        worker = self._worker(stream, batch.rank if batch.rank is not None else stream.source.dp_rank)
        # when it arrived: the sink's clock, as every trace's `t`
        t = round(self.sink.now(), 6)
        stamp(batch, worker, seq, t, self._text if self.tokenizer is not None else None)
        self.sink.emit_events(events)

    def _text(self, token_id: int) -> str:
        text = self._texts.get(token_id)
        if text is None:
            try:
                text = self.tokenizer.decode([token_id])
            # an id outside the tokenizer's vocabulary: show the id
            except Exception:
                text = f"<{token_id}>"
            self._texts[token_id] = text
        return text
