"""`kvtui stats`' rows add up: the phases sum to 'all' (requests with no phase are a row of their own when
others name one), and the prompt column counts what the hit rates count, every lookup's prompt."""

from __future__ import annotations

from pathlib import Path

from engine.trace import read_trace
from engine.trace.metrics import is_lookup
from engine.trace.stats import NO_PHASE, format_stats, summarize

SHARED = Path(__file__).resolve().parents[3] / "fixtures" / "traces" / "shared_system_8users.jsonl"
EDITS = SHARED.with_name("multi_turn_chat.jsonl")


def test_phases_add_up_to_all_when_some_requests_name_none():
    trace = read_trace(SHARED, strict=True)
    arrivals = [e for e in trace.events if e["type"] == "request_arrived"]
    unnamed = {arrivals[1]["request_id"], arrivals[2]["request_id"]}
    events = [
        {**e, "phase": None} if e["type"] == "request_arrived" and e["request_id"] in unnamed else e
        for e in trace.events
    ]
    *phases, total = summarize(trace.header, events)
    assert NO_PHASE in [p.phase for p in phases]
    for key in ("requests", "prompt_tokens", "generated_tokens"):
        assert sum(getattr(p, key) for p in phases) == getattr(total, key), key
    assert sum(p.hits.hit_tokens for p in phases) == total.hits.hit_tokens
    assert f"{NO_PHASE:<10}    2" in format_stats([*phases, total])


def test_prompt_counts_every_lookup_and_the_table_says_lookups():
    trace = read_trace(EDITS, strict=True)
    total = summarize(trace.header, trace.events)[-1]
    lookups = [e for e in trace.events if e["type"] == "prefix_match" and is_lookup(e)]
    assert total.prompt_tokens == sum(e["prompt_tokens"] for e in lookups) == 177
    assert total.hits.requests == 3 and total.requests == 1
    text = format_stats([total])
    # one request looked up three times: the rate of lookups with a hit is not called a request hit rate
    assert "lkp hit" in text and "req hit" not in text
