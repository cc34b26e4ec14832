"""Quiet rows through the engine core's own calls (engine/core/quiet_rows.py), without a model: found by `scan`,
set aside by the scheduler only where nothing it decides changes, and given their tokens only where the core's
stop rules, checked by the scan, cannot end them. tests/kvtui/whatif/test_quiet_rows.py compares whole what-if
runs with the step-by-step ones."""

from __future__ import annotations

import pytest

from engine.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.core.quiet_rows import scan
from engine.core.request import SamplingParams
from engine.models.shape import ModelShape
from engine.trace.writer import TraceSink

SHAPE = ModelShape(
    "m", layers=1, q_heads=1, kv_heads=1, head_dim=1, dtype="float32", elem_bytes=4, windows=(None,)
)


def _core(step_events: bool = False, eos_ids=frozenset(), **config) -> tuple[EngineCore, list[dict]]:
    sink = TraceSink(clock=lambda: 0.0)
    events: list[dict] = []
    sink.listeners.append(events.append)
    config = {"num_blocks": 32, "block_size": 8, **config}
    core = EngineCore(SHAPE, EngineConfig(**config), sink, eos_ids=eos_ids, step_events=step_events)
    return core, events


def _step(core: EngineCore, token: int = 5, set_aside=None) -> None:
    scheduled = core.schedule(set_aside=set_aside)
    if scheduled is not None:
        core.update_from_output(scheduled, lambda index, req: token)


def _decoding(core: EngineCore, *params: SamplingParams) -> list:
    """Requests of 3-token prompts, prefilled, each with its first token."""
    for i, p in enumerate(params):
        core.add_request([1, 2, 3 + i], p, request_id=f"q{i}")
    _step(core)
    return [core.request(f"q{i}") for i in range(len(params))]


def test_a_row_a_stop_token_or_eos_could_end_is_never_quiet():
    params = (
        SamplingParams(max_tokens=6, ignore_eos=True),
        SamplingParams(max_tokens=6, ignore_eos=True, stop_token_ids=[9]),
        SamplingParams(max_tokens=6),
    )
    core, _ = _core()
    _decoding(core, *params)
    assert [r.request_id for r in scan(core, {}).quiet] == ["q0", "q2"]
    # with an end-of-sequence token, the request that does not ignore it may end on any token
    core, _ = _core(eos_ids=frozenset({2}))
    _decoding(core, *params)
    found = scan(core, {})
    assert [r.request_id for r in found.quiet] == ["q0"] and found.run == 0


def test_a_decode_run_ends_where_the_stop_rules_could_end_a_row():
    core, _ = _core()
    (req,) = _decoding(core, SamplingParams(max_tokens=4, ignore_eos=True))
    found = scan(core, {})
    # its third token is its last but one: the fourth, max_tokens, stops it in an ordinary step
    assert found.run == 2
    with pytest.raises(ValueError, match="3 steps in a decode run of 2"):
        core.decode_run(found, 3, lambda rows, n: [6] * n * len(rows))
    core.decode_run(found, 2, lambda rows, n: [6, 7] * len(rows))
    assert req.output_token_ids == [5, 6, 7] and core.num_steps == 3
    # the scan was of step 1: it proves nothing now
    with pytest.raises(ValueError, match="scan again"):
        core.decode_run(found, 1, lambda rows, n: [8])
    assert scan(core, {}).quiet == []
    _step(core, token=8)
    assert req.finish_reason == "length" and req.output_token_ids == [5, 6, 7, 8]
    assert not core.has_unfinished()


def test_rows_set_aside_take_their_tokens_after_the_others():
    core, _ = _core()
    quiet = _decoding(core, SamplingParams(max_tokens=5, ignore_eos=True))
    core.add_request([40, 41, 42, 43], SamplingParams(max_tokens=5, ignore_eos=True), request_id="new")
    scheduled = core.schedule(set_aside=scan(core, {}))
    assert scheduled.set_aside == quiet
    assert [c.request.request_id for c in scheduled.chunks] == ["new"]
    order = []
    core.update_from_output(scheduled, lambda index, req: order.append((index, req.request_id)) or 5)
    assert order == [(0, "new"), (-1, "q0")]
    assert quiet[0].output_token_ids == [5, 5] and quiet[0].num_computed == 4


def test_rows_are_set_aside_only_where_no_decision_changes():
    # a budget of 4: the older quiet row keeps its token, the prefill behind it gets the other three
    core, _ = _core(max_batched_tokens=4)
    quiet = _decoding(core, SamplingParams(max_tokens=5, ignore_eos=True))
    core.add_request(list(range(50, 60)), SamplingParams(max_tokens=2), request_id="long")
    assert core.scheduler.can_set_aside(quiet)
    scheduled = core.schedule(set_aside=scan(core, {}))
    assert [c.num_tokens for c in scheduled.chunks] == [3]
    # an older request recomputing a longer prompt (an edit inserted 5 tokens) would take the budget the
    # quiet row needs for its token: an ordinary step instead, in which the quiet row waits
    core, _ = _core(max_batched_tokens=13)
    core.add_request(list(range(50, 60)), SamplingParams(max_tokens=5), request_id="old")
    core.add_request([1, 2, 3], SamplingParams(max_tokens=5, ignore_eos=True), request_id="young")
    _step(core)
    core.edit("old", 0, [70, 71, 72, 73, 74], kind="insert")
    young = core.request("young")
    assert scan(core, {}).quiet == [young]
    assert not core.scheduler.can_set_aside([young])
    scheduled = core.schedule(set_aside=scan(core, {}))
    assert scheduled.set_aside == [] and [c.request.request_id for c in scheduled.chunks] == ["old"]


def test_a_core_that_writes_step_events_sets_no_row_aside():
    core, _ = _core(step_events=True)
    reqs = _decoding(core, SamplingParams(max_tokens=5, ignore_eos=True))
    found = scan(core, {})
    assert found.quiet == reqs
    with pytest.raises(ValueError, match="no step events"):
        core.schedule(set_aside=found)
    with pytest.raises(ValueError, match="no step events"):
        core.decode_run(found, 1, lambda rows, n: [5] * n)
