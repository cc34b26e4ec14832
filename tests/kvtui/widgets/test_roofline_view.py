"""kvtui/state/roofline.py and kvtui/widgets/roofline.py: prefill vs decode on the roofline (the event itself:
tests/engine/worker/test_machine_probe.py)."""

from __future__ import annotations

import pytest

from kvtui.state import replay
from kvtui.state.roofline import Roofline, RooflineScan
from kvtui.widgets.base import View
from kvtui.widgets.roofline import RooflineView
from tests.helpers.tiny_trace import hybrid_trace

SMOLLM_LIKE = {
    "type": "roofline",
    "seq": 0,
    "t": 0.0,
    "device": "cpu",
    "dtype": "float32",
    "mem_bandwidth": 12e9,
    "peak_flops": 50e9,
    "weight_bytes": 540_000_000,
    "flops_per_token": 270_000_000,
}


def test_bound_floor_slope_and_ridge():
    roof = Roofline.from_event(SMOLLM_LIKE)
    # 540 MB / 12 GB/s
    assert roof.memory_floor == pytest.approx(0.045)
    # 270 MFLOP / 50 GFLOP/s
    assert roof.per_token == pytest.approx(0.0054)
    assert roof.ridge == pytest.approx(0.045 / 0.0054)
    # decode: flat, memory-bound
    assert roof.bound(1) == roof.bound(8) == pytest.approx(0.045)
    # prefill: grows with the tokens
    assert roof.bound(512) == pytest.approx(512 * 0.0054)
    assert roof.bound(1024) == pytest.approx(2 * roof.bound(512))


def test_scan_follows_a_growing_event_list_and_the_cursor():
    header, events = hybrid_trace()
    events = list(events)
    scan = RooflineScan()
    growing = events[:50]
    scan.update(growing)
    n50 = len(scan.points)
    # the same list grows in live mode: only the new events are scanned
    growing += events[50:]
    scan.update(growing)
    assert scan.scanned == len(events) and len(scan.upto(50)) == n50
    events_copy = list(events)
    # a new list: scanned from the start
    scan.update(events_copy)
    assert len(scan.points) == sum(1 for ev in events if ev["type"] == "step")
    steps = [ev for ev in events if ev["type"] == "step"]
    scan = RooflineScan()
    scan.update(events)
    assert [p.step for p in scan.points] == [ev["step"] for ev in steps]
    assert scan.roofline is not None and scan.roofline.weight_bytes == events[0]["weight_bytes"]
    assert len(scan.upto(50)) == sum(1 for ev in events[:50] if ev["type"] == "step") == n50
    kinds = {p.kind for p in scan.points}
    assert kinds == {"decode", "prefill", "mixed"}


def lines(events, width=110):
    header, _ = hybrid_trace()
    view = RooflineView()
    view.events = events
    view.view = View(replay(header, events))
    return [view.render_row(y, width).text.rstrip() for y in range(view.row_count(width))]


def test_render_names_the_floor_the_slope_and_every_step():
    _, events = hybrid_trace()
    text = lines([SMOLLM_LIKE] + [ev for ev in events if ev["type"] != "roofline"])
    assert text[1].startswith("memory floor 515.0 MiB of weights / 12.0 GB/s = 45.0ms per step")
    assert text[2].startswith(
        "compute      270.0 MFLOP per token / 50.0 GFLOP/s = 5.4ms per token · ridge at 8"
    )
    steps = [ev for ev in events if ev["type"] == "step"]
    assert text[3].startswith(f"measured     {len(steps)} steps · decode: median")
    # a line too long for the width goes on under its label, whole words only
    per_request = next(i for i, line in enumerate(text) if line.startswith("per request  "))
    assert per_request > 3 and all(line.startswith(" " * 13) for line in text[4:per_request])
    finished = [ev for ev in events if ev["type"] == "request_finished"]
    shortest = min(finished, key=lambda ev: (ev["num_prompt_tokens"], ev["request_id"]))
    assert text[per_request].startswith(f"per request  {shortest['num_prompt_tokens']} prompt tokens: TTFT ")
    chart = "\n".join(text[per_request + 3 :])
    assert "─" in chart and "╱" in chart and "●" in chart and "▲" in chart
    n = steps[-1]["num_tokens"]
    assert f"(step {steps[-1]['step']}: {n} token{'s' * (n != 1)}," in text[-1]


def test_a_trace_without_a_roofline_event_draws_the_steps_only():
    _, events = hybrid_trace()
    text = lines([ev for ev in events if ev["type"] != "roofline"])
    assert "no roofline event in this trace" in text[1]
    assert "●" in "\n".join(text) and "╱" not in "\n".join(text)
