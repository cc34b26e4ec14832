"""The attacher's silence watch (a mixin of `Attacher`, kvtui/sources/attach.py): a source that sends nothing is
said, once, after SILENT_AFTER seconds, with what the socket knows: whether anything answered at its address at
all (ZeroMQ connects in the background and never fails, so nothing else would tell a wrong port from an idle
server), or whether a server is there but publishes nothing the subscription matches.
"""

from __future__ import annotations

import time

import zmq
from zmq.utils.monitor import recv_monitor_message

from kvtui.sources.endpoints import Source

# seconds of silence before a source is said to send nothing (a replay at start takes up to its timeout)
SILENT_AFTER = 5.0
_PEER_EVENTS = zmq.EVENT_CONNECTED | zmq.EVENT_ACCEPTED


class SilenceWatch:
    """Needs from the attacher: sources, notices, _sockets (SUB socket -> Source), _streams (Stream by key),
    _monitors (monitor socket -> Source, empty) and _peered (an empty set)."""

    def _watch_socket(self, sock: zmq.Socket, source: Source) -> None:
        """Before `sock` connects or binds: a connection made at once is seen too."""
        self._monitors[sock.get_monitor_socket(_PEER_EVENTS)] = source

    def _watch_open(self) -> None:
        self._watch_from = time.monotonic()
        self._silence_told = False

    def _note_peers(self) -> None:
        for monitor, source in self._monitors.items():
            while monitor.poll(0):
                recv_monitor_message(monitor, zmq.NOBLOCK)
                self._peered.add(source.endpoint)

    def _watch_silence(self) -> None:
        """Note connections; once SILENT_AFTER has passed, tell each source that sent nothing."""
        self._note_peers()
        if self._silence_told or time.monotonic() - self._watch_from < SILENT_AFTER:
            return
        self._silence_told = True
        for source in self.silent_sources():
            self.notices.put(("warning", self.silence_text(source, SILENT_AFTER)))

    def _watch_close(self) -> None:
        # a connection made since the last look still counts in what silence_text says after the stop
        self._note_peers()
        for sock in self._sockets:
            sock.disable_monitor()
        for monitor in self._monitors:
            monitor.close(linger=0)
        self._monitors = {}

    def silent_sources(self) -> list[Source]:
        """The sources from which no batch was applied (live or replayed)."""
        heard = {stream.source.endpoint for stream in self._streams.values() if stream.workers}
        return [source for source in self.sources if source.endpoint not in heard]

    def silence_text(self, source: Source, seconds: float) -> str:
        """One line: what the silence of `source` over `seconds` most likely means, and what to check."""
        # a name of its own is said beside the address (the default name is the address without tcp://)
        named = source.name not in source.endpoint
        where = f"{source.name} ({source.endpoint})" if named else source.endpoint
        port = source.endpoint.rsplit(":", 1)[-1]
        topic = f"topic {source.topic!r}" if source.topic else "every topic"
        if source.endpoint not in self._peered and source.bind:
            return (
                f"{where}: no server connected in {seconds:.1f} s: give the servers this address as the "
                "endpoint of their --kv-events-config"
            )
        if source.endpoint not in self._peered:
            return (
                f"{where}: nothing answers there after {seconds:.1f} s: is the server up on that host, with "
                f'--kv-events-config "endpoint": "tcp://*:{port}"? (wrong host or port?)'
            )
        return (
            f"{where}: connected, but no KV events in {seconds:.1f} s: an idle server publishes none until it "
            f"serves a request; else check that its KV events are on and its topic (subscribed to {topic})"
        )
