"""The proxy's in-flight prompts: what vLLM serves a request from a request it has scheduled but not yet
published (kvtui/sources/in_flight.py), and the proxy taking the larger of that and the published view."""

from __future__ import annotations

import io
import json
import threading
import time

from engine.trace.attach_structs import KvBlockStored
from kvtui.sources.in_flight import InFlight
from kvtui.sources.proxy_log import LockedFleet
from kvtui.state.fleet import FleetState
from tests.kvtui.sources.test_proxy import FakeVllm, Running, post, raw_exchange


def test_whole_blocks_of_a_shared_head_under_the_same_salt():
    flight = InFlight()
    flight.add("a", list(range(40)), None)
    # 40 shared tokens: the other prompt's 2 whole blocks of 16 (its partial third is not cached)
    assert flight.served(list(range(40)) + [99] * 20, None, 16) == 32
    # never the last token: a 33-token prompt is served at most its first 32
    assert flight.served(list(range(33)), None, 16) == 32
    assert flight.served(list(range(32)), None, 16) == 16
    # another salt shares nothing; a divergence inside the second block keeps the first
    assert flight.served(list(range(40)), "tenant", 16) == 0
    assert flight.served(list(range(20)) + [7] * 20, None, 16) == 16
    flight.remove("a")
    assert flight.served(list(range(40)), None, 16) == 0


def attached_view() -> FleetState:
    """An attached worker whose view knows the block size (2 tokens) from another prompt's block only."""
    fleet = FleetState({})
    fleet.apply(
        {"seq": 0, "t": 0.0, "type": "attach_worker", "worker": "v", "source": "tcp://s:1", "name": "v"}
    )
    fleet.apply_all([KvBlockStored([1], None, [120, 121], 2, None, "GPU", None, None, None, 0, worker="v")])
    return fleet


class SlowVllm(FakeVllm):
    """The stand-in, answering completions after a pause: the first request is still in flight when the
    second arrives."""

    def do_POST(self):
        if self.path != "/tokenize":
            time.sleep(0.5)
        super().do_POST()


def proxy_before(handler) -> tuple:
    """A stand-in vLLM answering with `handler`, and the proxy in front of it explaining against an attached
    view: (server, running)."""
    from http.server import ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    return server, Running(url, explain=LockedFleet(attached_view()).explain)


def complete_in_background(running, prompt: str) -> threading.Thread:
    thread = threading.Thread(
        target=raw_exchange,
        args=(running.proxy.port, post("/v1/completions", {"model": "m", "prompt": prompt})),
    )
    thread.start()
    return thread


def wait_until(condition, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_the_proxy_predicts_from_a_request_in_flight():
    # the view knows the block size (2 tokens) from another prompt's block; nothing of "abcd..." is published
    server, running = proxy_before(SlowVllm)
    try:
        first = complete_in_background(running, "abcdef")
        wait_until(lambda: running.proxy.in_flight.prompts, 10)
        raw_exchange(running.proxy.port, post("/v1/completions", {"model": "m", "prompt": "abcdxy"}))
        first.join()
        wait_until(lambda: len(running.records) >= 2, 30)
        by_id = {r["request_id"]: r for r in running.records}
        second = by_id["proxy-2"]
        # "abcd" of the first prompt's whole blocks: 4 tokens, as vLLM would serve it
        assert (
            second["predicted_cached"] == second["in_flight_tokens"] == 4 and "in flight" in second["explain"]
        )
        assert not running.proxy.in_flight.prompts
    finally:
        running.close()
        server.shutdown()


class LateTokenize(FakeVllm):
    """The stand-in, answering the first prompt's /tokenize after the second's (the second's ids are known
    first), and both completions after that (both still in flight when the proxy explains them)."""

    second_tokenized = threading.Event()
    first_tokenized = threading.Event()

    def do_POST(self):
        data = self.rfile.read(int(self.headers["Content-Length"]))
        prompt = json.loads(data)["prompt"]
        if self.path == "/tokenize":
            if prompt == "abcdef":
                self.second_tokenized.wait(10)
                time.sleep(0.2)
            self._json({"tokens": [ord(c) for c in prompt], "count": len(prompt)})
            (self.second_tokenized if prompt == "abcdxy" else self.first_tokenized).set()
            return
        self.first_tokenized.wait(10)
        time.sleep(0.5)
        self.rfile = io.BytesIO(data)
        super().do_POST()


def test_predictions_follow_the_order_requests_were_forwarded_in():
    server, running = proxy_before(LateTokenize)
    try:
        first = complete_in_background(running, "abcdef")
        wait_until(lambda: running.proxy.stats.requests >= 1, 10)
        # forwarded second; its ids are known first
        raw_exchange(running.proxy.port, post("/v1/completions", {"model": "m", "prompt": "abcdxy"}))
        first.join()
        wait_until(lambda: len(running.records) >= 2, 30)
        by_id = {r["request_id"]: r for r in running.records}
        assert by_id["proxy-1"]["forwarded"] < by_id["proxy-2"]["forwarded"]
        # explained after the first: its blocks in flight count
        assert by_id["proxy-2"]["predicted_cached"] == by_id["proxy-2"]["in_flight_tokens"] == 4
    finally:
        running.close()
        server.shutdown()


def test_a_request_the_upstream_never_answers_leaves_the_in_flight_set():
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    requests = []

    # reads each request whole (the proxy's /metrics ask, then the completion) and hangs up without a word
    def hang_up():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            requests.append(conn.recv(65536))
            conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    running = Running(url, explain=LockedFleet(attached_view()).explain)
    try:
        # a prompt of token ids: explained (and put in flight) without a /tokenize
        answer = raw_exchange(
            running.proxy.port, post("/v1/completions", {"model": "m", "prompt": [5, 6, 7, 8]})
        )
        assert b"502 Bad Gateway" in answer
        assert any(b"/v1/completions" in r for r in requests)
        # out by the time the proxy closed the client's connection
        assert not running.proxy.in_flight.prompts
    finally:
        running.close()
        listener.close()
