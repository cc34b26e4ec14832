"""A source that sends nothing is said, with what the socket knows: nothing answers at the address, or a server
is there but publishes nothing; headless, nothing at all from any source is exit status 1 with that reason."""

from __future__ import annotations

import queue
import socket
import time

import pytest
import zmq
from click.testing import CliRunner

import kvtui.sources.attach_silence as silence
from engine.trace import TraceSink
from kvtui.cli import main
from kvtui.sources.attach import Attacher
from kvtui.sources.endpoints import parse_source


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _notices(attacher: Attacher) -> list[str]:
    out = []
    while True:
        try:
            out.append(attacher.notices.get_nowait()[1])
        except queue.Empty:
            return out


def test_headless_with_nothing_listening_exits_1_saying_so(tmp_path):
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    out = tmp_path / "a.jsonl"
    result = CliRunner().invoke(main, ["attach", endpoint, "--headless", "--duration", "0.5", "-o", str(out)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert f"{endpoint}: nothing answers there" in line and "wrong host or port" in line
    # nothing lost: the trace is there, its header whole
    assert out.read_text().startswith('{"type":"header"')


def test_headless_connected_to_a_silent_server_names_topic_and_idle(tmp_path):
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    try:
        # a loopback connection takes milliseconds: two seconds leave room for a loaded machine
        result = CliRunner().invoke(
            main, ["attach", f"tcp://127.0.0.1:{port}", "--topic", "kv", "--headless", "--duration", "2"]
        )
    finally:
        pub.close()
    assert result.exit_code == 1, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert "connected, but no KV events" in line and "idle server" in line and "topic 'kv'" in line


@pytest.mark.parametrize("bind", [False, True], ids=["connect", "bind"])
def test_the_attacher_warns_once_after_the_silence(monkeypatch, bind):
    monkeypatch.setattr(silence, "SILENT_AFTER", 0.2)
    source = parse_source(f"tcp://127.0.0.1:{_free_port()}", bind=bind)
    attacher = Attacher([source], TraceSink())
    attacher.start()
    try:
        assert attacher.ready.wait(10)
        deadline = time.monotonic() + 10
        told: list[str] = []
        while not told and time.monotonic() < deadline:
            told = _notices(attacher)
    finally:
        attacher.stop()
    (text,) = told
    assert ("no server connected" if bind else "nothing answers there") in text
    assert attacher.silent_sources() == [source]


def test_the_fleet_status_line_keeps_the_hint():
    from kvtui.app.fleet_app import FleetApp
    from kvtui.state.fleet import FleetState
    from kvtui.state.fleet_view import fleet_view

    class Collector:
        counters = {"messages": 0, "blocks": 0, "replayed": 0}
        view = None

    app = FleetApp(source="tcp://127.0.0.1:5557", collector=Collector())
    app.view = fleet_view(FleetState({}))
    assert "nothing yet" not in app.status_text()
    app.started -= silence.SILENT_AFTER
    assert "nothing yet: wrong address or topic, events off, or an idle server?" in app.status_text()
