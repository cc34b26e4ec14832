"""kvtui proxy against a stand-in for vLLM's OpenAI server (the real one: tests/integration): every byte passes
unchanged, both ways; each completion is recorded in the proxy-log format kvtui whatif reads; the prompt ids
come from the server's /tokenize; with an attached view, the prediction is compared with cached_tokens."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine.trace.attach_structs import KvBlockStored
from kvtui.bench.proxy_latency import ProxyThread
from kvtui.sources.proxy_log import LockedFleet
from kvtui.state.fleet import FleetState

# a vLLM /metrics page: its cache_config_info says block 16, 2048 blocks, prefix caching on
METRICS = Path(__file__).parent / "vllm_metrics.prom"


class FakeVllm(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            text = body.get("prompt") or "".join(m["content"] for m in body["messages"]) + "<gen>"
            return self._json({"tokens": [ord(c) for c in text], "count": len(text)})
        prompt = body.get("prompt") or ""
        usage = {"prompt_tokens": 4, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}}
        if not body.get("stream"):
            return self._json(
                {"id": "c1", "model": "m", "choices": [{"index": 0, "text": "abc"}], "usage": usage}
            )
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for piece in ("a", "b", "c"):
            self._chunk(f"data: {json.dumps({'model': 'm', 'choices': [{'index': 0, 'text': piece}]})}\n\n")
            time.sleep(0.01)
        self._chunk(f"data: {json.dumps({'model': 'm', 'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        assert prompt is not None

    def do_GET(self):
        if self.path == "/metrics":
            data = METRICS.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self._json({"status": "ok"})

    def _chunk(self, text):
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _json(self, obj):
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def upstream():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeVllm)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class Running(ProxyThread):
    """The proxy on its own loop thread, keeping the records it makes."""

    def __init__(self, upstream, **kwargs):
        super().__init__(upstream, **kwargs)
        self.records = []
        self.proxy.on_record.append(self.records.append)


def raw_exchange(port: int, request: bytes) -> bytes:
    """One request on a fresh socket; the answer's bytes until the server closes."""
    import socket

    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def post(path: str, body: dict) -> bytes:
    data = json.dumps(body).encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + data


def _strip_date(raw: bytes) -> bytes:
    return b"\r\n".join(line for line in raw.split(b"\r\n") if not line.lower().startswith(b"date:"))


@pytest.mark.parametrize("stream", [False, True])
def test_every_byte_passes_and_the_request_is_recorded(upstream, tmp_path, stream):
    log = open(tmp_path / "requests.jsonl", "w")
    running = Running(upstream, log=log)
    try:
        port_up = int(upstream.rsplit(":", 1)[1])
        request = post(
            "/v1/completions", {"model": "m", "prompt": "hi<|x|>\n", "stream": stream, "cache_salt": "s"}
        )
        direct = raw_exchange(port_up, request)
        proxied = raw_exchange(running.proxy.port, request)
        # the server's own Date header aside, the same bytes
        assert _strip_date(proxied) == _strip_date(direct)
        deadline = time.monotonic() + 30
        while not running.records and time.monotonic() < deadline:
            time.sleep(0.01)
        (record,) = running.records
        assert record["prompt_token_ids"] == [ord(c) for c in "hi<|x|>\n"]
        assert record["cache_salt"] == "s" and record["cached_tokens"] == 2
        assert record["output_token_ids"] == [97, 98, 99] and record["output_ids_from"] == "tokenize"
        assert record["ttft"] is not None and (record["tpot"] is not None) == stream
        # the server's cache settings, from its /metrics
        assert record["server"] == {"block_size": 16, "num_gpu_blocks": 2048, "enable_prefix_caching": True}
    finally:
        running.close()
        log.close()
    # the log is a workload kvtui whatif reads
    from kvtui.whatif.loaders import detect_format, load_proxy_log

    assert detect_format(tmp_path / "requests.jsonl") == "proxy-log"
    replayed = load_proxy_log(tmp_path / "requests.jsonl")
    (req,) = replayed.requests
    assert req.prompt == [ord(c) for c in "hi<|x|>\n"] and req.cache_salt == "s" and req.server_cached == 2
    assert replayed.server["num_gpu_blocks"] == 2048


def test_chat_prompt_ids_come_from_the_servers_tokenize(upstream):
    running = Running(upstream)
    try:
        raw_exchange(
            running.proxy.port,
            post("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "yo"}]}),
        )
        deadline = time.monotonic() + 30
        while not running.records and time.monotonic() < deadline:
            time.sleep(0.01)
        assert running.records[0]["prompt_token_ids"] == [ord(c) for c in "yo<gen>"]
    finally:
        running.close()


def test_with_an_attached_view_each_request_is_explained_and_compared(upstream):
    fleet = FleetState({})
    fleet.apply(
        {"seq": 0, "t": 0.0, "type": "attach_worker", "worker": "v", "source": "tcp://s:1", "name": "v"}
    )
    # the server holds one block of 2 tokens: "hi" under salt s (vLLM: in the first block's extra keys)
    fleet.apply_all(
        [KvBlockStored([1], None, [104, 105], 2, None, "GPU", None, None, [["s"]], 0, worker="v")]
    )
    locked = LockedFleet(fleet)
    running = Running(upstream, explain=locked.explain)
    try:
        raw_exchange(
            running.proxy.port, post("/v1/completions", {"model": "m", "prompt": "hi!!", "cache_salt": "s"})
        )
        raw_exchange(running.proxy.port, post("/v1/completions", {"model": "m", "prompt": "hi!!"}))
        deadline = time.monotonic() + 30
        while len(running.records) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        salted, plain = sorted(running.records, key=lambda r: r["request_id"])
        assert salted["predicted_cached"] == 2 and salted["agrees"] is True
        # the stand-in says 2 were cached, kvtui's view says none: flagged
        assert plain["predicted_cached"] == 0 and plain["agrees"] is False and "salt" in plain["explain"]
        assert plain["explain_reason"] == "salt"
    finally:
        running.close()


def test_the_latency_bench_measures_both_paths():
    """kvtui bench proxy's measurement (speed is reported by the bench, not asserted here)."""
    from kvtui.bench.proxy_latency import format_result, measure

    result = measure(20)
    assert result.requests == 20 and result.direct_p50 > 0 and result.proxied_p50 > 0
    assert "the proxy adds" in format_result(result)


@pytest.mark.anyio
async def test_the_attach_app_shows_the_proxys_requests(tmp_path):
    from kvtui.app.fleet_app import FleetApp

    log = tmp_path / "requests.jsonl"
    record = {
        "arrival": 100.0,
        "request_id": "proxy-1",
        "prompt_token_ids": [1] * 94,
        "cached_tokens": 64,
        "predicted_cached": 32,
        "agrees": False,
        "ttft": 0.131,
        "tpot": 0.037,
        "explain": "vllm: 1 block(s) = 32/94 tokens cached; nothing cached after block 0",
    }
    log.write_text(json.dumps(record) + "\n" + '{"arrival": 101')
    app = FleetApp(source="t", header={}, events=[], frame_rate=None, requests_log=str(log))
    async with app.run_test(size=(200, 40)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        text = str(app.query_one("#proxy-detail").render())
        assert "proxy-1" in text and "DISAGREES" in text and "131" in text and "nothing cached after" in text
        # the half-written line is read once it is whole
        with open(log, "a") as f:
            f.write(', "request_id": "proxy-2", "prompt_token_ids": [1], "cached_tokens": 0}\n')
        app.read_requests()
        await pilot.pause()
        assert app.query_one("#proxy-lanes").lane_ids() == ["proxy-1", "proxy-2"]


def test_expect_100_continue_is_relayed(upstream):
    """curl sends a body over 1 KiB only after the server's 100 Continue: the proxy relays it, so no second of
    waiting is added."""
    import socket

    running = Running(upstream)
    try:
        body = json.dumps({"model": "m", "prompt": "x" * 2000}).encode()
        head = (
            f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", running.proxy.port), timeout=30) as s:
            s.sendall(head)
            # the server's go-ahead comes before any body is sent: relayed, not waited out (no timing needed)
            go = s.recv(1024)
            assert go.startswith(b"HTTP/1.1 100")
            s.sendall(body)
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        assert b"200 OK" in out and b'"text": "abc"' in out
    finally:
        running.close()


def test_the_proxy_command(upstream, tmp_path):
    """`kvtui proxy` as a user runs it: a line per request on the terminal, the log written as they come."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "requests.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvtui",
            "proxy",
            "--upstream",
            upstream,
            "--listen",
            f"127.0.0.1:{port}",
            "--log",
            str(log),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        raw_exchange(port, post("/v1/completions", {"model": "m", "prompt": "hi"}))
        while time.monotonic() < deadline and not (log.exists() and log.read_text()):
            time.sleep(0.05)
        record = json.loads(log.read_text().splitlines()[0])
        assert record["prompt_token_ids"] == [104, 105] and record["cached_tokens"] == 2
    finally:
        proc.terminate()
        out = proc.communicate(timeout=10)[0]
    assert "proxy-1 /v1/completions 2 prompt tokens, vLLM cached 2" in out, out
    bad = subprocess.run(
        [sys.executable, "-m", "kvtui", "proxy", "--upstream", "127.0.0.1:8000"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "give the server's http://HOST:PORT" in bad.stderr
