"""The collector process (what `kvtui attach` runs with the UI): loopback publishers -> collector -> views over a
pipe; the fleet app in collector mode; stop closes a trace that replays to the very view the collector sent."""

from __future__ import annotations

import time

import pytest

from kvtui.app.loader import load_trace
from kvtui.sources.attach import attach_header
from kvtui.sources.collector import CollectorClient
from kvtui.sources.collector_messages import Explained, ViewReady
from kvtui.sources.endpoints import parse_source
from kvtui.state.fleet import replay_fleet
from kvtui.state.fleet_view import fleet_view
from tests.kvtui.sources.attach_publishers import (
    Publisher,
    SBatch,
    SBlockRemoved,
    SBlockStored,
    VBatch,
    VBlockStored,
    wait_for,
)

LOOP = "tcp://127.0.0.1:*"


def _view(client, with_tree=False, timeout=20.0):
    """The next view the collector sends (asked for now)."""
    client.asked = False
    client.ask(with_tree)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for message in client.poll():
            if isinstance(message, ViewReady):
                return message.view
        time.sleep(0.02)
    raise TimeoutError("no view from the collector")


@pytest.fixture
def two_servers():
    sgl, vll = Publisher(LOOP, replay=LOOP), Publisher(LOOP, replay=LOOP)
    sgl.publish(
        SBatch(
            0.0,
            [
                SBlockStored([11], None, [1, 2], 2, None, "GPU"),
                SBlockStored([12], 11, [3, 4], 2, None, "GPU"),
                SBlockStored([-13], 11, [3, 9], 2, None, "GPU"),
            ],
            0,
        ),
        send=False,
    )
    vll.publish(
        VBatch(0.0, [VBlockStored([11, 12], None, [1, 2, 3, 4], 2, None, "GPU", None)], 0), send=False
    )
    yield sgl, vll
    sgl.close()
    vll.close()


def test_collector_folds_sends_views_explains_and_closes_its_trace(two_servers, tmp_path):
    sgl, vll = two_servers
    sources = [
        parse_source(f"{sgl.endpoint},replay={sgl.replay},name=sgl"),
        parse_source(f"{vll.endpoint},replay={vll.replay},name=vllm"),
    ]
    out = tmp_path / "fleet.jsonl"
    client = CollectorClient(sources, attach_header(sources, None), out=str(out))
    try:
        assert wait_for(lambda: len(_view(client).workers) == 2, timeout=30)
        sgl.wait_subscribed()
        # live, after the replayed history
        sgl.publish(SBatch(1.0, [SBlockRemoved([-13])], 0))
        assert wait_for(lambda: {c["worker"]: c["removed"] for c in _view(client).workers}.get("sgl") == 1)
        view = _view(client, with_tree=True)
        cells = {c["worker"]: c for c in view.workers}
        assert cells["sgl"]["resident"] == 2 and cells["vllm"]["resident"] == 2 and view.unique == 2
        # the shared prefix
        assert any(r.holders == ("sgl", "vllm") and r.blocks == 2 for r in view.tree)
        client.explain([1, 2, 3, 9, 5], {})
        said = []
        assert wait_for(
            lambda: said.extend(m.text for m in client.poll() if isinstance(m, Explained)) or said
        )
        assert "removed at" in said[0], said
    finally:
        counters = client.stop()
    assert client.stopped and counters["malformed"] == 0 and counters["blocks"] == 6
    loaded = load_trace(str(out))
    assert loaded.error is None and loaded.header["kind"] == "attach"
    replayed = fleet_view(replay_fleet(loaded.header, loaded.events), tree=True)

    # the rates are per second of the stream's clock: the replay reads them at its end
    def facts(cells):
        return [{k: v for k, v in c.items() if not k.endswith("_per_s")} for c in cells]

    assert facts(replayed.workers) == facts(view.workers)
    assert replayed.tree == view.tree and replayed.unique == view.unique and replayed.nodes == view.nodes


def test_a_collector_that_dies_is_told_not_waited_for():
    sources = [parse_source("tcp://127.0.0.1:1,name=nobody")]
    client = CollectorClient(sources, attach_header(sources, None))
    _view(client)
    client.process.kill()
    client.process.join(5)
    assert wait_for(lambda: (client.poll(), client.dead)[1] is not None)
    assert client.dead == "the collector process stopped (exit code -9)" and not client.stopped
    # no view will come: asking is harmless
    client.ask(False)
    started = time.monotonic()
    client.stop(timeout=60)
    # nothing to wait for: a wait would take the whole timeout, a loaded machine a few seconds at most
    assert time.monotonic() - started < 30


def test_a_collector_that_cannot_start_says_why():
    import zmq

    squatter = zmq.Context.instance().socket(zmq.PUB)
    port = squatter.bind_to_random_port("tcp://127.0.0.1")
    try:
        sources = [parse_source(f"tcp://127.0.0.1:{port},name=here", bind=True)]
        client = CollectorClient(sources, attach_header(sources, None))
        assert wait_for(lambda: (client.poll(), client.dead)[1] is not None, timeout=30)
        assert "cannot open the sockets" in client.dead and not client.stopped
        client.stop(timeout=1)
    finally:
        squatter.close(0)


# two collector servers and the fleet app over ZeroMQ, about 11 s: with the slow remainder (tests/conftest.py)
@pytest.mark.slow
@pytest.mark.anyio
async def test_fleet_app_draws_the_collectors_views(two_servers):
    from kvtui.app.fleet_app import FleetApp

    sgl, vll = two_servers
    sources = [
        parse_source(f"{sgl.endpoint},replay={sgl.replay},name=sgl"),
        parse_source(f"{vll.endpoint},replay={vll.replay},name=vllm"),
    ]
    client = CollectorClient(sources, attach_header(sources, None))
    app = FleetApp(source="attach", collector=client, frame_rate=None)
    try:
        async with app.run_test(size=(160, 40)) as pilot:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and (app.view is None or len(app.view.workers) < 2):
                app.tick()
                await pilot.pause(0.05)
            table = app.query_one("#fleet-table")
            text = "\n".join(table.render_line(y).text for y in range(7))
            assert "2 workers" in text and "sgl" in text and "vllm" in text
            assert "LIVE attach" in app.status_text() and "5 block hashes received" in app.status_text()
            await pilot.press("2")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not app.query_one("#fleet-tree").rows:
                app.tick()
                await pilot.pause(0.05)
            rows = [app.query_one("#fleet-tree").render_line(y).text for y in range(4)]
            assert any("[sgl,vllm] x2" in r for r in rows), rows
            await pilot.press("3")
            app.query_one("#explain-input").text = "1 2 3 9"
            await pilot.press("ctrl+s")
            deadline = time.monotonic() + 10
            while (
                time.monotonic() < deadline
                and "removed" not in str(app.query_one("#explain-out").render())
                and "divergent" not in str(app.query_one("#explain-out").render())
            ):
                app.tick()
                await pilot.pause(0.05)
            assert "prompt tokens against 2 workers" in str(app.query_one("#explain-out").render())
    finally:
        client.stop()
