"""Reading kvtui proxy's log back: whole lines only, from an offset, and a long log from its tail."""

from __future__ import annotations

import json

from kvtui.sources.proxy_log import read_log, tail_offset


def test_only_whole_lines_are_read_and_the_offset_moves_past_them(tmp_path):
    log = tmp_path / "requests.jsonl"
    log.write_text('{"request_id": "proxy-1"}\nnot json\n{"request_id": "pro')
    records, offset = read_log(str(log), 0)
    assert records == [{"request_id": "proxy-1"}]
    with open(log, "a") as f:
        f.write('xy-2"}\n')
    records, offset = read_log(str(log), offset)
    assert records == [{"request_id": "proxy-2"}] and offset == log.stat().st_size
    assert read_log(str(tmp_path / "missing.jsonl"), 5) == ([], 5)


def test_a_long_log_is_read_from_the_first_whole_line_of_its_tail(tmp_path):
    log = tmp_path / "requests.jsonl"
    lines = [json.dumps({"request_id": f"proxy-{i}", "pad": "x" * 50}) + "\n" for i in range(100)]
    log.write_text("".join(lines))
    assert tail_offset(str(log), 10**6) == 0
    # a window that starts inside line 97: lines 98 and 99
    window = len(lines[-1]) * 2 + 5
    records, _ = read_log(str(log), tail_offset(str(log), window))
    assert [r["request_id"] for r in records] == ["proxy-98", "proxy-99"]
    # a window that starts exactly at a line keeps that line
    records, _ = read_log(str(log), tail_offset(str(log), len(lines[-1]) * 3))
    assert [r["request_id"] for r in records] == ["proxy-97", "proxy-98", "proxy-99"]
    assert tail_offset(str(tmp_path / "missing.jsonl"), 10) == 0


def test_a_request_line_says_both_predictions_and_how_long_it_was_queued():
    from kvtui.sources.proxy_log import summary_line

    record = {
        "request_id": "proxy-7",
        "endpoint": "/v1/completions",
        "prompt_token_ids": [1] * 100,
        "cached_tokens": 32,
        "predicted_cached": 64,
        "agrees": False,
        "forwarded": 10.0,
        "admitted": 10.25,
        "predicted_at_admission": 32,
        "agrees_at_admission": True,
    }
    line = summary_line(record)
    assert "vLLM cached 32, kvtui predicted 64  DISAGREES" in line
    assert "32 at its admission (queued; its admission step ended 250 ms after it was forwarded)" in line
    line = summary_line({**record, "predicted_at_admission": 0, "agrees_at_admission": False})
    assert "0 at its admission (DISAGREES)" in line
