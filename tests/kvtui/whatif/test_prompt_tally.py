"""Hit + missed = 100% of prompt tokens, edits and preemptions included: every prefix lookup's prompt (the first
admission and each edit's) is counted once, hit or missed for one cause, in `kvtui stats`, its --json and
`prompt_tally` alike."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from engine.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.core.request import SamplingParams
from engine.trace import TraceSink, read_trace
from engine.trace.metrics import is_lookup
from kvtui.cli import main
from kvtui.whatif.causes import prompt_tally
from tests.helpers.model_free import SHAPE

ROOT = Path(__file__).resolve().parents[3]
TRACES = sorted((ROOT / "fixtures" / "traces").glob("*.jsonl"))


def _lookups(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] == "prefix_match" and is_lookup(e)]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.stem)
def test_hit_and_missed_are_every_lookups_prompt_tokens(path):
    trace = read_trace(path, strict=True)
    lookups = _lookups(trace.events)
    result = CliRunner().invoke(main, ["stats", "--json", str(path)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    misses = out["misses"]
    prompt = sum(e["prompt_tokens"] for e in lookups)
    assert misses["prompt_tokens"] == prompt == out["all"]["prompt_tokens"]
    assert misses["hit_tokens"] + sum(misses["causes"].values()) == prompt
    assert misses["lookups"] == out["all"]["hit_counts"]["lookups"] == len(lookups)
    # no fixture trace preempts: every token a lookup served is a hit, as the token hit rate counts them
    assert (
        misses["hit_tokens"]
        == sum(e["matched_tokens"] for e in lookups)
        == out["all"]["hit_counts"]["hit_tokens"]
    )
    # the phases add up to the whole trace
    for key in ("requests", "prompt_tokens", "generated_tokens"):
        if out["phases"]:
            assert sum(p[key] for p in out["phases"]) == out["all"][key], key

    text = CliRunner().invoke(main, ["stats", str(path)]).output
    shown = re.search(
        r"(\d[\d,]*) prompt tokens .*: ([\d,]+) hit \(([\d.]+)%\) \+ ([\d,]+) missed \(([\d.]+)%\)", text
    )
    assert shown, text
    n, hit, hit_pct, missed, missed_pct = shown.groups()
    assert int(n.replace(",", "")) == prompt
    assert int(hit.replace(",", "")) + int(missed.replace(",", "")) == prompt
    assert float(hit_pct) + float(missed_pct) == pytest.approx(100.0, abs=0.11)
    assert f"of the {missed_pct}% of prompt tokens missed" in text


def test_multi_turn_chat_counts_each_turns_prompt():
    trace = read_trace(ROOT / "fixtures" / "traces" / "multi_turn_chat.jsonl", strict=True)
    tally = prompt_tally(trace.header, trace.events)
    # three lookups: 27 (cold), 59 (42 hit), 91 (74 hit); the last token of each is always computed
    assert (tally.prompt_tokens, tally.hit_tokens, tally.lookups) == (177, 116, 3)
    assert tally.missed["last_token"] == 3
    assert sum(tally.missed.values()) == tally.missed_tokens == 61


def _preempting_run_with_edits() -> tuple[dict, list[dict]]:
    """A model-free engine: a cached head, then a pool too small for three answers at once, so a request that
    hit the head is preempted and the head evicted before it comes back; then two edits."""
    events: list[dict] = []
    sink = TraceSink(clock=lambda: 0.0)
    sink.listeners.append(events.append)
    config = EngineConfig(block_size=4, num_blocks=8, max_batched_tokens=64, max_num_seqs=2)
    core = EngineCore(SHAPE, config, sink)

    def run() -> None:
        while core.has_unfinished():
            scheduled = core.schedule()
            if scheduled is not None:
                core.update_from_output(scheduled, lambda index, req: 7)

    head = list(range(100, 112))
    core.add_request(head + [1, 2], SamplingParams(max_tokens=2, ignore_eos=True))
    run()
    prompts = [head + [200, 300], list(range(1000, 1014)), head + [202, 302]]
    rids = [core.add_request(p, SamplingParams(max_tokens=10, ignore_eos=True)) for p in prompts]
    run()
    core.edit(rids[0], 13, [55, 56], "insert")
    core.edit(rids[2], 5, [57], "replace")
    run()
    return {"block_size": 4}, events


def test_preemption_and_edits_add_up():
    header, events = _preempting_run_with_edits()
    kinds = [e["type"] for e in events]
    assert "request_preempted" in kinds and kinds.count("edit") == 2
    lookups = _lookups(events)
    tally = prompt_tally(header, events)
    assert tally.lookups == len(lookups) == 6
    assert tally.prompt_tokens == sum(e["prompt_tokens"] for e in lookups)
    assert tally.hit_tokens + sum(tally.missed.values()) == tally.prompt_tokens
    # what a lookup served and was computed again after a preemption is a miss, not a hit
    served = sum(e["matched_tokens"] for e in lookups)
    assert tally.missed["preemption"] > 0
    assert tally.hit_tokens + tally.missed["preemption"] == served
