"""The proxy's requests as the attach app holds them: times, the disagreement, arrival order, the bound."""

from __future__ import annotations

import pytest

from kvtui.state.proxy_requests import ProxyRequests, proxy_request


def record(i: int, arrival: float, **fields) -> dict:
    out = {
        "arrival": arrival,
        "request_id": f"proxy-{i}",
        "prompt_token_ids": list(range(94)),
        "output_token_ids": list(range(11)),
        "ttft": 0.2,
        "tpot": 0.05,
    }
    return out | fields


def test_times_of_a_streamed_request():
    req = proxy_request(record(1, 100.0), 0)
    assert req.first_token == pytest.approx(100.2)
    # 11 tokens: the first, then 10 TPOTs
    assert req.last_token == pytest.approx(100.7)
    assert (req.prompt_tokens, req.output_tokens) == (94, 11)


def test_output_ids_missing_fall_back_to_vllms_completion_count():
    req = proxy_request(record(1, 100.0, output_token_ids=None, completion_tokens=11), 0)
    assert req.output_tokens == 11 and req.last_token == pytest.approx(100.7)


def test_a_request_without_tpot_ends_at_its_first_token_and_one_without_ttft_has_no_token():
    assert proxy_request(record(1, 5.0, tpot=None), 0).last_token == pytest.approx(5.2)
    assert proxy_request(record(1, 5.0, ttft=None), 0).last_token is None


def test_disagrees_only_when_both_figures_are_known_and_differ():
    assert proxy_request(record(1, 0.0, cached_tokens=64, predicted_cached=32), 0).disagrees
    assert not proxy_request(record(1, 0.0, cached_tokens=64, predicted_cached=64), 0).disagrees
    # without --attach, or a server that reports no cached tokens: nothing to compare
    assert not proxy_request(record(1, 0.0, cached_tokens=64), 0).disagrees
    assert not proxy_request(record(1, 0.0, predicted_cached=0), 0).disagrees


def test_the_explainer_fields_are_kept():
    req = proxy_request(
        record(1, 0.0, explain="vllm: ...", explain_reason="salt", caveat="history incomplete"), 0
    )
    assert (req.explain, req.reason, req.caveat) == ("vllm: ...", "salt", "history incomplete")


def test_requests_are_ordered_by_arrival_and_span_to_the_last_token():
    held = ProxyRequests()
    # the log is in finishing order: a long request that arrived first is written last
    assert held.extend([record(2, 101.0), record(1, 100.0, tpot=1.0)]) == 2
    assert held.order == ["proxy-1", "proxy-2"]
    assert held.t0 == 100.0
    # proxy-1: first token at 0.2 s, then 10 tokens a second
    assert held.span == pytest.approx(10.2)


def test_only_the_last_requests_are_kept_and_colours_count_the_whole_log():
    held = ProxyRequests(last=3)
    held.extend([record(i, float(i)) for i in range(1, 5)])
    held.extend([record(5, 5.0)])
    assert held.order == ["proxy-3", "proxy-4", "proxy-5"]
    assert [held.by_id[rid].ordinal for rid in held.order] == [2, 3, 4]
    assert held.t0 == 3.0


def test_a_restarted_proxy_counting_from_one_again_keeps_both_requests():
    held = ProxyRequests()
    held.extend([record(1, 1.0), record(1, 9.0)])
    assert held.order == ["proxy-1", "proxy-1#2"]


def test_lines_that_are_not_objects_are_skipped_and_a_missing_arrival_takes_the_one_before():
    held = ProxyRequests()
    assert held.extend([record(1, 4.0), [1, 2], "x", {"request_id": "proxy-2"}]) == 2
    assert held.by_id["proxy-2"].arrival == 4.0
    assert held.extend([]) == 0


def test_latencies_disagreements_and_the_request_shown():
    held = ProxyRequests()
    assert held.pick(None) is None
    held.extend(
        [
            record(1, 1.0, ttft=0.1, cached_tokens=0, predicted_cached=0),
            record(2, 2.0, ttft=0.3, tpot=None, cached_tokens=32, predicted_cached=0),
        ]
    )
    found = held.latencies()
    assert found["ttft"]["n"] == 2 and found["ttft"]["p50"] == pytest.approx(0.2)
    assert found["tpot"]["n"] == 1 and found["tpot"]["p50"] == pytest.approx(0.05)
    assert held.disagreements() == 1
    # nothing chosen (or the choice dropped out): the latest arrival
    assert held.pick(None) == "proxy-2" and held.pick("gone") == "proxy-2"
    assert held.pick("proxy-1") == "proxy-1"
