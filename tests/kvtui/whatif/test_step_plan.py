"""When vLLM did each request's work, read from its steps: the admission is the step that stored a run of the
request's prompt blocks (the earliest waiting request's, first come first served), a prompt stored over several
steps was prefilled in chunks, tokens between two block-filling steps go evenly unless the request stalled,
and answers that ended a few ms apart ended in one step."""

from __future__ import annotations

from engine.core.hashing import block_hashes
from kvtui.sources.server_view import Step
from kvtui.whatif.requests import SimRequest
from kvtui.whatif.step_plan import StepPlan, finishes, paced

BS = 4


def request(rid, arrival, prompt, n_out=3, first=1.0, end=2.0):
    return SimRequest(rid, arrival, prompt, [9] * n_out, n_out, timeline=(first, end))


def keys(tokens):
    return block_hashes(tokens, BS)[0]


def test_a_shared_run_is_the_earliest_waiting_requests_and_chunks_follow():
    doc = list(range(100, 112))
    a = request("a", 0.0, doc + [1, 2, 3, 4, 5])
    b = request("b", 0.1, doc + [6, 7, 8, 9, 5], first=3.0, end=4.0)
    ka, kb = keys(a.prompt), keys(b.prompt)
    steps = [
        # a's first chunk: the shared document (b waits too: the run is a's, who came first)
        Step(0, 0.5, stored=ka[:3], runs=[ka[:3]]),
        # a's last prompt block; b's own block (the document hit)
        Step(1, 0.6, stored=[ka[3], kb[3]], runs=[[ka[3]], [kb[3]]]),
    ]
    plan = StepPlan([a, b], steps, BS)
    assert plan.admit == {"a": 0.5, "b": 0.6}
    assert plan.admit_step == {"a": 0, "b": 1}
    # a: 12 tokens and into the next block, then its whole prompt
    assert plan.chunks["a"] == [(0.5, 13), (0.6, 17)]
    assert plan.chunks["b"] == [(0.6, 17)]
    assert plan.owners[ka[0]] == ["a", "b"] and plan.position[ka[3]] == 3


def test_a_request_that_stored_nothing_comes_in_after_those_before_it():
    doc = list(range(100, 108))
    a = request("a", 0.0, doc + [1])
    b = request("b", 0.1, doc + [2])
    ka = keys(a.prompt)
    plan = StepPlan([a, b], [Step(0, 0.5, stored=ka, runs=[ka])], BS)
    assert plan.admit == {"a": 0.5, "b": 0.5} and plan.admit_step["b"] is None


def test_a_run_after_a_requests_first_token_is_not_its_admission():
    a = request("a", 0.0, list(range(8)) + [1], first=0.2, end=0.5)
    ka = keys(a.prompt)
    plan = StepPlan([a], [Step(0, 3.0, stored=ka, runs=[ka])], BS)
    assert plan.admit_step["a"] is None and plan.admit["a"] == 0.0


def test_tokens_go_evenly_between_anchors_and_at_the_step_pace_when_stalled():
    recorded = [1.0 + 0.1 * j for j in range(9)]
    assert [round(t, 6) for t in paced(recorded, {0: 1.0, 4: 1.4}, 0.1)[:5]] == [1.0, 1.1, 1.2, 1.3, 1.4]
    # 4 tokens in 2 s against a 0.1 s step: stalled, so 0.1 s apart from the anchor, then wait
    recorded = [1.0 + 0.5 * j for j in range(9)]
    times = paced(recorded, {0: 1.0, 4: 3.0}, 0.1)
    assert [round(t, 6) for t in times[:6]] == [1.0, 1.1, 1.2, 1.3, 3.0, 3.1]
    # past the last anchor: to the recorded end
    assert times[-1] == recorded[-1] == 5.0


def test_answers_ending_a_few_ms_apart_ended_in_one_step():
    rs = [request("a", 0.0, [1], end=1.0), request("b", 0.0, [1], end=1.004), request("c", 0.0, [1], end=1.5)]
    assert finishes(rs) == {"a": 1.004, "b": 1.004, "c": 1.5}
