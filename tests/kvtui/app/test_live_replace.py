"""The token strip's replace on the real engine (kvtui.app.feed.apply_live_edit): the selection, one token or a range,
is replaced by the typed text whatever its length in tokens. The reported bug: typing "V cache and an LRU" to
replace 'V' at position 28 of "What is a KV cache? Answer in one sentence." also replaced the tokens after it."""

from __future__ import annotations

import pytest

from engine.core.edits import EditError, apply_edit
from engine.engine import Engine, EngineConfig, SamplingParams
from kvtui.app.feed import apply_live_edit
from kvtui.state import replay

pytestmark = pytest.mark.smollm2

QUESTION = [{"role": "user", "content": "What is a KV cache? Answer in one sentence."}]
TYPED = "V cache and an LRU"


@pytest.fixture(scope="module")
def engine():
    return Engine.load("smollm2", EngineConfig(device="cpu", num_blocks=64))


def _run(engine, events):
    engine.trace.listeners.append(events.append)
    rid = engine.submit(QUESTION, SamplingParams(max_tokens=2))
    while engine.has_unfinished():
        engine.step()
    return rid


def _finish(engine):
    while engine.has_unfinished():
        engine.step()


def test_the_reported_bug_and_its_fix(engine):
    events: list[dict] = []
    rid = _run(engine, events)
    req = engine.requests[rid]
    prompt = list(req.prompt_token_ids)
    assert engine.token_text(prompt[28]) == "V"
    typed = engine.tokenizer.encode(TYPED, add_special_tokens=False)
    assert len(typed) > 1
    # the bug: the live UI sent engine.edit(..., typed, "replace"), which swaps as many tokens as it is given
    old_path = apply_edit(prompt, list(req.output_token_ids), 28, typed, "replace")
    assert old_path.prompt[28 + len(typed) :] == prompt[28 + len(typed) :]
    # ' cache? Answer in' ... swallowed
    assert old_path.prompt[: 28 + len(typed)] == prompt[:28] + typed
    # the fix: the selection (one token, 'V') goes; everything after it stays
    apply_live_edit(engine, rid, 28, TYPED, "replace", num_tokens=1, expected_token=prompt[28])
    assert req.prompt_token_ids == prompt[:28] + typed + prompt[29:]
    _finish(engine)
    # what the UI shows is what the engine did
    shown = replay(engine.trace.header, events).requests[rid]
    assert shown.token_ids == req.prompt_token_ids + req.output_token_ids
    assert "".join(shown.texts[24:]).startswith(
        "What is a KV cache and an LRU cache? Answer in one sentence."
    )


def test_a_selected_range_is_replaced_by_shorter_text(engine):
    events: list[dict] = []
    rid = _run(engine, events)
    req = engine.requests[rid]
    prompt = list(req.prompt_token_ids)
    assert [engine.token_text(t) for t in prompt[29:31]] == [" cache", "?"]
    apply_live_edit(engine, rid, 29, "!", "replace", num_tokens=2, expected_token=prompt[29])
    assert (
        req.prompt_token_ids
        == prompt[:29] + engine.tokenizer.encode("!", add_special_tokens=False) + prompt[31:]
    )
    _finish(engine)
    shown = replay(engine.trace.header, events).requests[rid]
    assert shown.token_ids == req.prompt_token_ids + req.output_token_ids


def test_a_stale_view_is_refused_and_nothing_changes(engine):
    rid = _run(engine, [])
    req = engine.requests[rid]
    before = list(req.prompt_token_ids)
    with pytest.raises(EditError, match="the view is behind the engine"):
        apply_live_edit(engine, rid, 28, TYPED, "replace", num_tokens=1, expected_token=before[28] + 1)
    assert req.prompt_token_ids == before
