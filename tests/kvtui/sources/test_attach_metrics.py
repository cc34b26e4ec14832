"""/metrics of vLLM and SGLang, from fixtures written with their metric names; polled over HTTP by the attacher."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from engine.trace import TraceSink
from kvtui.sources.attach import Attacher
from kvtui.sources.endpoints import parse_source
from kvtui.sources.prometheus import parse_text, summarize
from kvtui.state.fleet import FleetState
from kvtui.state.fleet_view import worker_cells
from kvtui.state.server_figures import histogram_quantile, token_hit_rate
from tests.kvtui.sources.attach_publishers import wait_for

HERE = Path(__file__).parent
VLLM = (HERE / "vllm_metrics.prom").read_text()
SGLANG = (HERE / "sglang_metrics.prom").read_text()


def test_vllm_metrics_per_rank():
    ranks = summarize(VLLM)
    assert set(ranks) == {"0", "1"}
    r0 = ranks["0"]
    assert r0["kv_usage"] == 0.25 and r0["preemptions"] == 3 and r0["running"] == 4 and r0["waiting"] == 2
    assert r0["num_gpu_blocks"] == 2048 and r0["block_size"] == 16
    assert token_hit_rate(r0) == 0.75 and token_hit_rate(ranks["1"]) == 0.0
    assert r0["ttft_buckets"][-1] == [None, 100.0] and r0["ttft_count"] == 100
    assert histogram_quantile(0.5, r0["ttft_buckets"]) == pytest.approx(0.1)
    assert histogram_quantile(0.7, r0["ttft_buckets"]) == pytest.approx(0.1 + 0.9 * 20 / 40)
    assert histogram_quantile(0.99, r0["ttft_buckets"]) == pytest.approx(1.0 + 9.0 * 9 / 10)


def test_sglang_metrics_and_junk_lines():
    facts = summarize(SGLANG)[""]
    assert facts["kv_usage"] == 0.125 and token_hit_rate(facts) == 0.6
    assert histogram_quantile(0.5, facts["ttft_buckets"]) == pytest.approx(0.5 * 5 / 8)
    assert ("process_cpu_seconds_total", {}, 12.5) in parse_text(SGLANG)


def test_hit_rate_over_an_interval():
    before = {"prefix_queries": 1000.0, "prefix_hits": 750.0}
    assert token_hit_rate({"prefix_queries": 1200.0, "prefix_hits": 760.0}, before) == pytest.approx(0.05)


class _Page(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = VLLM.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_the_attacher_polls_metrics_into_the_fleet_row():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    # no publisher: metrics only
    source = parse_source(f"tcp://127.0.0.1:1,name=gpu,metrics={url}")
    sink, fleet = TraceSink(), FleetState({})
    sink.listeners.append(fleet.apply)
    attacher = Attacher([source], sink, metrics_every=0.2)
    attacher.start()
    try:
        assert wait_for(lambda: ("tcp://127.0.0.1:1", "0") in fleet.metrics)
    finally:
        attacher.stop()
        server.shutdown()
    sink.emit(
        "attach_worker",
        worker="gpu",
        source=source.endpoint,
        name="gpu",
        rank=0,
        replay=None,
        metrics=url,
        blocks=None,
    )
    cells = worker_cells(fleet, fleet.workers["gpu"])
    assert cells["kv_usage"] == 0.25 and cells["capacity"] == 2048 and cells["preemptions"] == 3
    assert cells["ttft"][0] == pytest.approx(0.1)
