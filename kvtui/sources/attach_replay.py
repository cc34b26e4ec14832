"""The attacher's replay side (a mixin of `Attacher`, kvtui/sources/attach.py): at start, everything still in a
publisher's buffer; on a gap, the missing batches. A fresh DEALER asks the publisher's ROUTER for every batch from
a sequence number (`[b"", start_seq]`); it answers `[b"", topic, seq, payload]` (vLLM >= 0.26, SGLang) or
`[b"", seq, payload]` (older vLLM), ended by seq 0xff..ff. What replay cannot fill is counted as lost
(`attach_gap`); a reply naming a topic the subscription cannot match is told once.
"""

from __future__ import annotations

import time

import zmq

from kvtui.sources.endpoints import Source
from kvtui.sources.sequence import Stream
from kvtui.sources.wire import END_SEQ, Batch, WireError, decode_payload, decode_seq

# replayed batches received between two calls of the after_messages callbacks
REPLAY_SERVE_EVERY = 200


class ReplayRecovery:
    """Needs from the attacher: ctx, sink, notices, counters, replay_timeout, _stop, _topic_told, and its
    _stream, _apply, _after and _malformed."""

    def _initial_replay(self, source: Source) -> None:
        """At start: everything still in the publisher's buffer (events are deltas; there is no snapshot)."""
        stream = self._stream(source, "", source.topic.encode())
        batches, answered = self._fetch(source, 0)
        if not answered:
            return
        if batches:
            first = batches[0][0]
            if first > 0:
                self._gap_event(stream, "late_join", 0, first, 0, first)
            for seq, batch in batches:
                self._apply(stream, seq, batch)

    def _recover(self, stream: Stream, first: int, upto: int, kind: str) -> None:
        """Batches first .. upto-1 are missing: fetch them, apply those in order, count the rest as lost."""
        recovered = 0
        if stream.source.replay:
            batches, _ = self._fetch(stream.source, first)
            for seq, batch in batches:
                if first <= seq < upto and seq > stream.tracker.applied:
                    self._apply(stream, seq, batch)
                    recovered += 1
        self._gap_event(stream, kind, first, upto, recovered, (upto - first) - recovered)

    def _gap_event(self, stream: Stream, kind: str, first: int, got: int, recovered: int, lost: int) -> None:
        self.counters.gaps += 1
        self.counters.lost += lost
        self.sink.emit(
            "attach_gap",
            source=stream.source.endpoint,
            kind=kind,
            expected=first,
            got=got,
            recovered=recovered,
            lost=lost,
        )

    def _fetch(self, source: Source, start: int) -> tuple[list[tuple[int, Batch]], bool]:
        """Ask the replay endpoint for every buffered batch from `start`: ([(seq, batch)], whether it answered)."""
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        out: list[tuple[int, Batch]] = []
        answered = False
        try:
            dealer.connect(source.replay)
            dealer.send_multipart([b"", start.to_bytes(8, "big")])
            deadline = time.monotonic() + self.replay_timeout
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not dealer.poll(int(left * 1000)):
                    what = (
                        "finish answering" if answered else "answer (is the server up, replay_endpoint set?)"
                    )
                    self.notices.put(
                        (
                            "warning",
                            f"{source.name}: the replay endpoint {source.replay} did not "
                            f"{what} within {self.replay_timeout:g}s",
                        )
                    )
                    break
                frames = dealer.recv_multipart()
                answered = True
                if len(out) % REPLAY_SERVE_EVERY == REPLAY_SERVE_EVERY - 1:
                    # a long replay: the collector still answers (and hears stop)
                    self._after()
                    if self._stop.is_set():
                        break
                # a long replay is fine while it flows
                deadline = time.monotonic() + self.replay_timeout
                if frames and frames[0] == b"":
                    frames = frames[1:]
                if len(frames) == 3:
                    # [topic, seq, payload] (vLLM >= 0.26, SGLang) -> [seq, payload]
                    self._check_topic(source, frames[0])
                    frames = frames[1:]
                if len(frames) != 2:
                    self._malformed(source, f"replay reply of {len(frames)} frames", sum(map(len, frames)))
                    continue
                if frames[0] == END_SEQ:
                    break
                self.counters.replayed += 1
                try:
                    out.append((decode_seq(frames[0]), decode_payload(frames[1])))
                except (WireError, RecursionError) as exc:
                    self._malformed(source, f"replay: {exc}", len(frames[1]))
        except zmq.ZMQError as exc:
            self.notices.put(("warning", f"{source.name}: replay from {source.replay} failed: {exc}"))
        finally:
            dealer.close(linger=0)
        out.sort(key=lambda item: item[0])
        return out, answered

    def _check_topic(self, source: Source, topic: bytes) -> None:
        """A replay reply names the server's topic: a subscription that cannot match it receives nothing live."""
        if not topic or topic.startswith(source.topic.encode()) or source.endpoint in self._topic_told:
            return
        self._topic_told.add(source.endpoint)
        text = topic.decode("utf-8", "replace")
        self.notices.put(
            (
                "warning",
                f"{source.name}: the server publishes topic {text!r}, not {source.topic!r}: nothing will arrive "
                f"live (the replay still loaded its buffer); attach with --topic {text} (or topic={text})",
            )
        )
        self.sink.emit(
            "attach_malformed",
            source=source.endpoint,
            reason=f"wrong topic: the server's is {text!r}",
            size=0,
        )
