"""`kvtui proxy` with its upstream down, or hanging up without an answer: the client gets a 502 that says why,
and the proxy's terminal gets a line (not an empty reply and silence)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

from kvtui.bench.proxy_latency import ProxyThread

BODY = b'{"model": "m", "prompt": "hi"}'
REQUEST = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _exchange(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(REQUEST)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def _answer(raw: bytes) -> tuple[str, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode(), json.loads(body)


def test_an_upstream_that_is_down_is_a_502_with_the_reason():
    up = f"http://127.0.0.1:{_free_port()}"
    running = ProxyThread(up)
    told = []
    running.proxy.on_problem.append(told.append)
    try:
        status, body = _answer(_exchange(running.proxy.port))
    finally:
        running.close()
    assert status == "HTTP/1.1 502 Bad Gateway"
    assert f"cannot reach the upstream {up}" in body["error"]["message"] and body["error"]["code"] == 502
    assert told == [f"502 for POST /v1/completions: {body['error']['message']}"]


def test_an_upstream_that_hangs_up_without_answering_is_a_502():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    # every connection: the proxy's own /metrics request at its start, then the client's request
    def hang_up():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    running = ProxyThread(f"http://127.0.0.1:{listener.getsockname()[1]}")
    try:
        status, body = _answer(_exchange(running.proxy.port))
    finally:
        running.close()
        listener.close()
    assert status == "HTTP/1.1 502 Bad Gateway"
    assert "closed the connection without answering" in body["error"]["message"]


def test_the_command_warns_at_start_and_logs_each_502():
    port, up = _free_port(), f"http://127.0.0.1:{_free_port()}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvtui",
            "proxy",
            "--upstream",
            up,
            "--listen",
            f"127.0.0.1:{port}",
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # generous: a loaded machine starts Python slowly
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        status, _ = _answer(_exchange(port))
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    assert status == "HTTP/1.1 502 Bad Gateway"
    assert f"warning: nothing answers at {up}" in out, out
    assert "kvtui proxy: 502 for POST /v1/completions: cannot reach the upstream" in out, out
