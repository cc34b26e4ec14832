"""SOURCE arguments, --dp-size expansion, bad input as one line, and --bind with servers that connect to us."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from engine.trace import TraceSink
from kvtui.cli import main
from kvtui.sources.attach import Attacher
from kvtui.sources.endpoints import Source, SourceError, parse_source, parse_sources
from kvtui.state.fleet import FleetState
from tests.kvtui.sources.attach_publishers import (
    Publisher,
    SBatch,
    SBlockStored,
    VBatch,
    VBlockStored,
    wait_for,
)


def test_source_options_and_dp_expansion():
    (s,) = parse_sources(
        ["tcp://10.0.0.5:5557,replay=tcp://10.0.0.5:5558,name=gpu-a,blocks=4096"],
        topic="kv-events",
        metrics="http://10.0.0.5:8000/metrics",
    )
    assert (s.name, s.replay, s.topic, s.metrics, s.blocks) == (
        "gpu-a",
        "tcp://10.0.0.5:5558",
        "kv-events",
        "http://10.0.0.5:8000/metrics",
        4096,
    )
    ranks = parse_sources(["tcp://h:5557,replay=tcp://h:5600"], dp_size=3)
    assert [(r.endpoint, r.replay, r.name, r.dp_rank) for r in ranks] == [
        ("tcp://h:5557", "tcp://h:5600", "h:5557/dp0", 0),
        ("tcp://h:5558", "tcp://h:5601", "h:5557/dp1", 1),
        ("tcp://h:5559", "tcp://h:5602", "h:5557/dp2", 2),
    ]


@pytest.mark.parametrize(
    "text, words",
    [
        ("10.0.0.5:5557", "not tcp://HOST:PORT"),
        ("tcp://h:99999", "out of range"),
        ("tcp://*:5557", "only makes sense with --bind"),
        ("tcp://h:5557,color=red", "is not one of"),
        ("tcp://h:5557,replay=h:5558", "replay endpoint"),
        ("tcp://h:5557,metrics=h:8000", "http"),
        ("tcp://h:5557,blocks=-3", "positive integer"),
    ],
)
def test_bad_sources(text, words):
    with pytest.raises(SourceError, match=words):
        parse_source(text)


@pytest.mark.parametrize(
    "args, words",
    [
        (["tcp://h:5557", "tcp://h:5557"], "given twice"),
        (["tcp://h:5557", "--dp-size", "0"], "--dp-size must be at least 1"),
        (["tcp://h:5557", "--metrics", "localhost:8000"], "http(s)://"),
        (["tcp://h:5557", "--headless", "--duration", "-1"], "--duration must be positive"),
        (["tcp://h:5557", "--headless", "--explain", "some words"], "--tokenizer"),
    ],
)
def test_bad_command_lines_are_one_line(args, words):
    result = CliRunner().invoke(main, ["attach", *args])
    assert result.exit_code != 0 and words in result.output and "Traceback" not in result.output


def test_bind_receives_from_servers_that_connect():
    sink, fleet = TraceSink(), FleetState({})
    sink.listeners.append(fleet.apply)
    # the OS picks the port
    source = Source(endpoint="tcp://127.0.0.1:*", name="bound", bind=True)
    attacher = Attacher([source], sink)
    # bind first, to learn the port the OS gave
    attacher._open()
    (sock,) = attacher._sockets
    bound = sock.getsockopt_string(__import__("zmq").LAST_ENDPOINT)
    a, b = Publisher(bound, topic="a", bind=False), Publisher(bound, topic="b", bind=False)
    try:
        import threading
        import time

        stop = threading.Event()

        def loop():
            while not stop.is_set():
                attacher._drain(sock, source)
                time.sleep(0.01)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        a.wait_subscribed()
        b.wait_subscribed()
        a.publish(VBatch(0.0, [VBlockStored([1], None, [1, 2], 2, None, "GPU", None)], 0))
        b.publish(SBatch(0.0, [SBlockStored([1], None, [1, 2], 2, None, "GPU")], 0))
        assert wait_for(lambda: len(fleet.workers) == 2)
        stop.set()
        thread.join(2)
    finally:
        a.close()
        b.close()
        for s in attacher._sockets:
            s.close(0)
    # two servers on one bound socket: told apart by peer address and topic; each has its own sequence
    assert sorted(fleet.workers) == ["127.0.0.1/a", "127.0.0.1/b"]
    assert fleet.holders_of((0, f"{1:016x}")) == ["127.0.0.1/a", "127.0.0.1/b"]
    assert attacher.counters.restarts == 0 and attacher.counters.gaps == 0
