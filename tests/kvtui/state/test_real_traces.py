"""The four small traces recorded from the real SmolLM2 engine (tests/kvtui/data): loader, opening, reducer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.trace import read_trace
from kvtui.app.loader import load_trace
from kvtui.state import replay, state_fingerprint
from kvtui.state.opening import interesting_request, opening_cursor
from kvtui.state.timeline import Timeline
from kvtui.widgets.base import View
from kvtui.widgets.block_table import BlockTableView
from kvtui.widgets.miss import explain

DATA = Path(__file__).resolve().parents[1] / "data"
NAMES = ("chat_template_jitter", "multi_turn_chat", "edit_series", "long")


@pytest.mark.parametrize("name", NAMES)
def test_fast_loader_equals_the_strict_reader(name):
    strict = read_trace(DATA / f"{name}.jsonl", strict=True)
    fast = load_trace(str(DATA / f"{name}.jsonl"))
    assert fast.error is None and fast.events == strict.events and fast.header == strict.header


def test_loader_reports_bad_line_keeps_before_and_skips_unknown_types(tmp_path):
    lines = (DATA / "chat_template_jitter.jsonl").read_text().splitlines()
    last_seq = json.loads(lines[-1])["seq"]
    future = json.dumps({"seq": last_seq + 1, "t": 9.0, "type": "ring_resume_v2", "request_id": "x"})
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines[:11] + ["{not json"] + lines[11:]) + "\n")
    loaded = load_trace(str(path))
    assert loaded.error is not None and loaded.error.line == 12 and len(loaded.events) == 10
    # and a truncated tail
    path.write_text("\n".join(lines + [future]) + "\n" + lines[5][:20])
    loaded = load_trace(str(path))
    assert loaded.error is None and loaded.truncated_tail and loaded.unknown_types == {"ring_resume_v2": 1}
    # the reducer ignores the unknown type
    replay(loaded.header, loaded.events)


def test_opening_point_and_request():
    jitter = read_trace(DATA / "chat_template_jitter.jsonl")
    tl = Timeline(jitter.header, jitter.events)
    # blocks stay cached at the end: open there
    assert opening_cursor(tl) == len(tl)
    # the request that missed on one space
    assert interesting_request(tl.tip) == "jitter"
    long = read_trace(DATA / "long.jsonl")
    tl = Timeline(long.header, long.events)
    k = opening_cursor(tl)
    # everything freed at the end: open at the busiest step
    assert k < len(tl) and tl.state_at(k).n_used > 0


def test_miss_explainer_shows_the_jitter_space_and_recomputed_equal_tokens():
    parsed = read_trace(DATA / "chat_template_jitter.jsonl")
    state = replay(parsed.header, parsed.events)
    text = explain(state, state.requests["jitter"]).plain
    assert "16 of 52 prompt tokens" in text and "position 27" in text and "␣Answer" in text
    assert "positions 16-26 equal the cache" in text


def test_finished_request_table_lists_what_the_tree_keeps():
    parsed = read_trace(DATA / "edit_series.jsonl")
    state = replay(parsed.header, parsed.events)
    widget = BlockTableView(View(state, "memo"))
    rows = [widget.render_line(y).text for y in range(5)]
    assert "tree keeps 8/9 blocks" in rows[0]
    assert rows[2].startswith(" kept: L0-L7, 128 tokens from the prefix tree")
    assert rows[3].split()[:2] == ["L0", "P9"]


def test_eviction_trims_the_node_one_block_at_a_time():
    parsed = read_trace(DATA / "chat_template_jitter.jsonl")
    state = replay(parsed.header, parsed.events)
    node_id, node = next((i, n) for i, n in state.nodes.items() if i and len(n.blocks) == 2)
    last = node.blocks[-1]
    state.apply(
        {
            "seq": 10_000,
            "t": 9.0,
            "type": "block_evicted",
            "physical": last,
            "hash": "h",
            "policy": "lru",
            "node_id": node_id,
        }
    )
    assert state.nodes[node_id].blocks == node.blocks[:1]
    assert len(state.nodes[node_id].token_ids) == state.block_size and last not in state.block_node


def test_fork_shares_the_parents_sequence_so_far():
    parsed = read_trace(DATA / "chat_template_jitter.jsonl")
    state = replay(parsed.header, parsed.events[:30])
    parent = state.requests["original"]
    prompt = parent.token_ids[: parent.prompt_len]
    state.apply(
        {
            "seq": 10_000,
            "t": 9.0,
            "type": "request_arrived",
            "request_id": "original.1",
            "prompt_token_ids": prompt,
            "prompt_texts": parent.texts[: parent.prompt_len],
            "max_tokens": 8,
            "parent_id": "original",
        }
    )
    child = state.requests["original.1"]
    assert child.token_ids == parent.token_ids and child.prompt_len == parent.prompt_len
    state.apply(
        {
            "seq": 10_001,
            "t": 9.1,
            "type": "token_emitted",
            "request_id": "original.1",
            "position": parent.num_tokens,
            "token_id": 5,
            "text": "x",
        }
    )
    assert child.num_tokens == parent.num_tokens + 1 if child is state.requests["original.1"] else True
    assert state.requests["original.1"].texts[-1] == "x"


def test_ring_resume_and_sink_divergence_are_kept_on_the_request():
    parsed = read_trace(DATA / "chat_template_jitter.jsonl")
    state = replay(parsed.header, parsed.events)
    state.apply(
        {
            "seq": 10_000,
            "t": 9.0,
            "type": "ring_resume",
            "request_id": "jitter",
            "wanted": 32,
            "position": 20,
            "source": "snapshot",
            "recompute_tokens": 12,
            "reason": "window",
        }
    )
    state.apply(
        {
            "seq": 10_001,
            "t": 9.1,
            "type": "sink_divergence",
            "request_id": "jitter",
            "max_logit_diff": 0.5,
            "positions": [1, 2],
            "sink_tokens": 4,
            "window": 8,
            "argmax_changed": 1,
        }
    )
    req = state.requests["jitter"]
    assert req.ring_resume["position"] == 20 and req.sink_divergence["argmax_changed"] == 1
    assert state_fingerprint(state)["requests"]["jitter"]


def test_sink_rings_keep_the_first_positions_in_their_own_slots():
    """streaming_sinks: 4 sinks + W=32 on every layer; slot = position for sinks, 4 + position mod 32 after."""
    trace = read_trace(
        Path(__file__).parents[3] / "fixtures" / "traces" / "streaming_sinks.jsonl", strict=True
    )
    state = replay(trace.header, trace.events)
    ring = next(iter(state.rings.values()))
    assert ring.sinks == 4 and len(ring.slots) == 36
    assert ring.slots[:4] == [0, 1, 2, 3]
    last = max(ring.slots)
    assert ring.slots[4 + last % 32] == last and min(p for p in ring.slots[4:]) == last - 31
