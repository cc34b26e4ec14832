"""Attach shows how the served engine stores K/V where vLLM exports it (`cache_config_info`'s cache_dtype)."""

from __future__ import annotations

from pathlib import Path

from engine.trace import TraceSink
from kvtui.sources.prometheus import summarize
from kvtui.state.fleet import FleetState
from kvtui.state.fleet_view import worker_cells
from kvtui.widgets.fleet_table import row_segments

VLLM = (Path(__file__).parent / "vllm_metrics.prom").read_text()


def fleet_with(page: str) -> tuple[FleetState, dict]:
    sink, fleet = TraceSink(), FleetState({})
    sink.listeners.append(fleet.apply)
    source = "tcp://127.0.0.1:1"
    sink.emit("attach_metrics", source=source, rank="0", facts=summarize(page)["0"])
    sink.emit(
        "attach_worker",
        worker="gpu",
        source=source,
        name="gpu",
        rank=0,
        replay=None,
        metrics="m",
        blocks=None,
    )
    return fleet, worker_cells(fleet, fleet.workers["gpu"])


def test_the_served_cache_dtype_reaches_the_fleet_row():
    assert summarize(VLLM)["0"]["cache_dtype"] == "auto"
    _, cells = fleet_with(VLLM)
    assert cells["cache_dtype"] == "auto"
    assert "KV auto (model dtype)" in "".join(s.text for s in row_segments(cells, 0))
    _, cells = fleet_with(VLLM.replace('cache_dtype="auto"', 'cache_dtype="fp8_e4m3"'))
    assert "KV fp8_e4m3 · " in "".join(s.text for s in row_segments(cells, 0))


def test_a_page_without_it_shows_nothing_of_it():
    page = VLLM.replace('cache_dtype="auto",', "")
    assert "cache_dtype" not in summarize(page)["0"]
    _, cells = fleet_with(page)
    assert cells["cache_dtype"] is None and "KV " not in "".join(s.text for s in row_segments(cells, 0))
