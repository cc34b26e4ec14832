"""`kvtui bench proxy`: the latency kvtui proxy adds to a request, measured against a direct connection.

An upstream on loopback answers every request with one write on a keep-alive connection (no Nagle stalls,
nothing to compute), so what is left is the proxy's own cost: the same request is sent direct and through the
proxy, interleaved, and the p50 of each is compared. Run it with nothing else busy: the load average is printed.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import statistics
import threading
import time
from dataclasses import dataclass

from kvtui.sources.proxy import Proxy


@dataclass
class LatencyResult:
    requests: int
    direct_p50: float
    proxied_p50: float

    @property
    def added_p50(self) -> float:
        return self.proxied_p50 - self.direct_p50


def fast_upstream() -> tuple[socket.socket, int]:
    """A loopback server that answers every request on a keep-alive connection with one write."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    answer = json.dumps({"id": "c", "model": "m", "choices": [{"index": 0, "text": "ok"}]}).encode()
    reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(answer),
        answer,
    )

    def serve(conn):
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data
            while b"\r\n\r\n" in buf:
                head, _, rest = buf.partition(b"\r\n\r\n")
                lengths = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
                length = int(lengths[0].split(b":")[1]) if lengths else 0
                if len(rest) < length:
                    break
                buf = rest[length:]
                conn.sendall(reply)

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener, listener.getsockname()[1]


class ProxyThread:
    """kvtui proxy on its own event loop thread."""

    def __init__(self, upstream: str, **kwargs):
        self.proxy = Proxy(upstream, **kwargs)
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run():
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.proxy.start())
            started.set()
            self.loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        if not started.wait(10):
            raise RuntimeError("the proxy did not start")

    def close(self) -> None:
        async def shutdown():
            # handlers cancelled mid-read, and records still pending, are expected at shutdown: not errors
            self.loop.set_exception_handler(lambda loop, context: None)
            self.proxy.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


def measure(requests: int = 300) -> LatencyResult:
    listener, port = fast_upstream()
    running = ProxyThread(f"http://127.0.0.1:{port}")
    direct = http.client.HTTPConnection("127.0.0.1", port)
    proxied = http.client.HTTPConnection("127.0.0.1", running.proxy.port)
    body = json.dumps({"model": "m", "prompt": [1, 2, 3]})
    times: dict[str, list[float]] = {"direct": [], "proxied": []}
    try:
        for _ in range(requests):
            for name, conn in (("direct", direct), ("proxied", proxied)):
                start = time.perf_counter()
                conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                conn.getresponse().read()
                times[name].append(time.perf_counter() - start)
    finally:
        direct.close()
        proxied.close()
        running.close()
        listener.close()
    return LatencyResult(requests, statistics.median(times["direct"]), statistics.median(times["proxied"]))


def format_result(result: LatencyResult) -> str:
    load = os.getloadavg()
    return (
        f"{result.requests} requests each way, interleaved, keep-alive, loopback\n"
        f"direct p50 {result.direct_p50 * 1000:.2f} ms, through kvtui proxy p50 {result.proxied_p50 * 1000:.2f} ms: "
        f"the proxy adds {result.added_p50 * 1000:.2f} ms at p50\n"
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
