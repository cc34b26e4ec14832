"""engine/trace/metrics.py: token / request / block hit rates, cumulative and windowed."""

from __future__ import annotations

import pytest

from engine.core.miss_explainer import PrefixMatch
from engine.trace import validate_event
from engine.trace.metrics import HitRateTracker


def test_no_requests_gives_zero_rates_not_errors():
    fields = HitRateTracker().event_fields()
    assert fields == {
        "token_hit_rate": 0.0,
        "request_hit_rate": 0.0,
        "block_hit_rate": 0.0,
        "window": {"n": 0, "size": 32, "token_hit_rate": 0.0, "request_hit_rate": 0.0, "block_hit_rate": 0.0},
    }


def test_the_three_rates():
    tracker = HitRateTracker()
    # warm
    tracker.record(matchable_tokens=40, hit_tokens=32, block_lookups=2, block_hits=2)
    # cold
    tracker.record(matchable_tokens=40, hit_tokens=0, block_lookups=2, block_hits=0)
    tracker.record(matchable_tokens=20, hit_tokens=16, block_lookups=1, block_hits=1)
    total = tracker.total
    assert total.token_hit_rate == pytest.approx(48 / 100)
    assert total.request_hit_rate == pytest.approx(2 / 3)
    assert total.block_hit_rate == pytest.approx(3 / 5)


def test_the_window_keeps_only_the_last_n_requests():
    tracker = HitRateTracker(window=2)
    tracker.record(10, 10, 1, 1)
    tracker.record(10, 0, 1, 0)
    tracker.record(10, 5, 1, 0)
    fields = tracker.event_fields()
    assert fields["window"] == {
        "n": 2,
        "size": 2,
        "token_hit_rate": 0.25,
        "request_hit_rate": 0.5,
        "block_hit_rate": 0.0,
    }
    assert fields["token_hit_rate"] == pytest.approx(0.5) and fields["block_hit_rate"] == pytest.approx(1 / 3)


def test_a_window_of_running_sums_equals_a_recount():
    tracker = HitRateTracker(window=5)
    records = [(n % 7 + 3, n % 4, n % 3 + 1, n % 2) for n in range(40)]
    for record in records:
        tracker.record(*record)
    recent = records[-5:]
    assert tracker.windowed.hit_tokens == sum(r[1] for r in recent)
    assert tracker.windowed.block_lookups == sum(r[2] for r in recent)
    assert tracker.windowed.hit_requests == sum(1 for r in recent if r[1])


def test_record_match_uses_tokens_that_could_match():
    tracker = HitRateTracker()
    one = tracker.record_match(PrefixMatch([3, 4], "full_match", {}, prompt_tokens=9, block_size=4))
    assert (one.matchable_tokens, one.hit_tokens, one.block_lookups, one.block_hits) == (8, 8, 2, 2)
    off = tracker.record_match(PrefixMatch.disabled(9, 4))
    assert (off.hit_tokens, off.block_lookups, off.hit_requests) == (0, 2, 0)
    assert tracker.total.token_hit_rate == 0.5


def test_bad_counts_and_windows_are_refused():
    with pytest.raises(ValueError, match="out of range"):
        HitRateTracker().record(4, 8, 1, 1)
    with pytest.raises(ValueError, match="at least one request"):
        HitRateTracker(window=0)


def test_event_fields_match_the_schema():
    tracker = HitRateTracker()
    tracker.record(10, 4, 2, 1)
    assert validate_event({"seq": 0, "t": 0.0, "type": "hit_rates", **tracker.event_fields()}) is None
