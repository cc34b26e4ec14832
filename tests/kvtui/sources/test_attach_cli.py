"""`kvtui attach --headless -o TRACE` against a loopback publisher; the recording replays to the same views."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kvtui.app.fleet_app import FleetApp
from kvtui.app.loader import load_trace
from kvtui.cli import main
from kvtui.state.fleet import replay_fleet
from kvtui.state.fleet_stats import workers_summary
from kvtui.state.fleet_view import worker_cells
from tests.kvtui.sources.attach_publishers import (
    Publisher,
    SBatch,
    SBlockRemoved,
    SBlockStored,
    VBatch,
    VBlockStored,
)

LOOP = "tcp://127.0.0.1:*"


@pytest.fixture
def recorded(tmp_path):
    """Two servers' histories, fetched by replay at start: an SGLang-style chain and a vLLM run."""
    sgl, vll = Publisher(LOOP, replay=LOOP), Publisher(LOOP, replay=LOOP)
    sgl.publish(
        SBatch(
            0.0,
            [
                SBlockStored([11], None, [1, 2], 2, None, "GPU"),
                SBlockStored([12], 11, [3, 4], 2, None, "GPU"),
                SBlockStored([13], 11, [3, 9], 2, None, "GPU"),
            ],
            0,
        ),
        send=False,
    )
    sgl.publish(SBatch(1.0, [SBlockRemoved([13])], 0), send=False)
    vll.publish(
        VBatch(0.0, [VBlockStored([11, 12], None, [1, 2, 3, 4], 2, None, "GPU", None)], 0), send=False
    )
    out = tmp_path / "fleet.jsonl"
    result = CliRunner().invoke(
        main,
        [
            "attach",
            f"{sgl.endpoint},replay={sgl.replay},name=sgl",
            f"{vll.endpoint},replay={vll.replay},name=vllm",
            "--headless",
            "--duration",
            "1.5",
            "-o",
            str(out),
            "--explain",
            "1 2 3 9 5",
            "--explain",
            "1 2 3 4 5",
        ],
    )
    sgl.close()
    vll.close()
    assert result.exit_code == 0, result.output
    return out, result.output


def test_headless_summary_and_explainer(recorded):
    _, output = recorded
    assert "2 gaps" not in output and "0 malformed" in output
    assert "sgl: 1 block(s) = 2/5 tokens cached; block 1 was cached here and removed at" in output
    assert (
        "vllm: 1 block(s) = 2/5 tokens cached; first differing token at position 3: prompt has 9, the cache "
        "has 4" in output
    )
    assert "sgl: 2 block(s) = 4/5 tokens cached; the last 1 token(s) do not fill a block of 2" in output


def test_the_trace_replays_to_the_same_fleet(recorded):
    out, _ = recorded
    header = json.loads(out.read_text().splitlines()[0])
    assert header["kind"] == "attach" and len(header["config"]["sources"]) == 2
    loaded = load_trace(str(out))
    assert loaded.error is None
    fleet = replay_fleet(loaded.header, loaded.events)
    summary = {w["name"]: w for w in workers_summary(fleet)}
    assert summary["sgl"]["resident_blocks"] == 2 and summary["sgl"]["blocks_removed"] == 1
    assert summary["vllm"]["resident_blocks"] == 2 and summary["vllm"]["blocks_stored"] == 2
    # the shared first block: duplicated
    assert fleet.holders_of((0, f"{11:016x}")) == ["sgl", "vllm"]
    result = CliRunner().invoke(main, ["replay", str(out), "--check"])
    assert result.exit_code == 0 and "events" in result.output


@pytest.mark.anyio
async def test_fleet_app_replays_the_recording(recorded):
    out, _ = recorded
    loaded = load_trace(str(out))
    app = FleetApp(source=str(out), header=loaded.header, events=loaded.events, frame_rate=None)
    async with app.run_test(size=(160, 40)) as pilot:
        table = app.query_one("#fleet-table")
        text = "\n".join(table.render_line(y).text for y in range(7))
        assert (
            "2 workers" in text and "sgl" in text and "vllm" in text and "lacks: physical block ids" in text
        )
        await pilot.press("2")
        await pilot.pause()
        tree = app.query_one("#fleet-tree")
        rows = [tree.render_line(y).text for y in range(4)]
        assert any("[sgl,vllm] x2" in r for r in rows), rows
        await pilot.press("3")
        await pilot.pause()
        app.query_one("#explain-input").text = "1 2 3 9"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert "removed at" in str(app.query_one("#explain-out").render())
    cells = worker_cells(app.fleet, app.fleet.workers["sgl"])
    assert cells["resident"] == 2 and cells["capacity"] is None


def test_stats_json_has_the_workers(recorded):
    out, _ = recorded
    result = CliRunner().invoke(main, ["stats", "--json", str(out)])
    assert result.exit_code == 0, result.output
    workers = {w["name"]: w for w in json.loads(result.output)["workers"]}
    assert workers["sgl"] == {
        "source": workers["sgl"]["source"],
        "name": "sgl",
        "worker": "sgl",
        "rank": 0,
        "resident_blocks": 2,
        "extra_copies": 0,
        "rereported_blocks": 0,
        "blocks_stored": 3,
        "blocks_removed": 1,
        "tiers": {"GPU": {"resident_blocks": 2, "blocks_stored": 3, "blocks_removed": 1}},
        "gaps": 0,
        "lost_batches": 0,
        "restarts": 0,
        "malformed": 0,
    }
    assert workers["sgl"]["source"].startswith("tcp://127.0.0.1:")
    text = CliRunner().invoke(main, ["stats", str(out)]).output
    assert "resident" in text and "vllm" in text
