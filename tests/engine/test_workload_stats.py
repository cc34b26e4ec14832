import json

import pytest

from engine.engine import Engine, EngineConfig
from engine.trace import read_trace
from engine.trace.metrics import percentile, tpot
from engine.trace.stats import format_stats, summarize
from engine.workload import WorkloadError, load_workload, run_workload
from tests.helpers.tiny_models import random_prompts, tiny_model


def write(tmp_path, data):
    path = tmp_path / "w.json"
    path.write_text(json.dumps(data))
    return path


def test_workload_runs_arrivals_edits_and_phases(tmp_path):
    shared = random_prompts([12], seed=30)[0]
    path = write(
        tmp_path,
        {
            "requests": [
                {
                    "id": "a",
                    "prompt_token_ids": shared + [1, 2],
                    "phase": "cold",
                    "sampling": {"max_tokens": 3},
                },
                {
                    "id": "b",
                    "arrival_step": 4,
                    "prompt_token_ids": shared + [3, 4],
                    "phase": "warm",
                    "sampling": {"max_tokens": 3},
                },
            ],
            "edits": [
                {
                    "request_id": "a",
                    "after_finish": True,
                    "position": "end",
                    "kind": "insert",
                    "token_ids": [7, 8],
                }
            ],
        },
    )
    workload = load_workload(path)
    engine = Engine.from_model(tiny_model("llama-gqa"), config=EngineConfig(block_size=4, num_blocks=32))
    engine.add_trace_file(tmp_path / "t.jsonl")
    outs = run_workload(engine, workload)
    engine.close()
    assert [o.request_id for o in outs] == ["a", "b"]
    # turn 1, the appended turn, turn 2
    assert len(engine.requests["a"].output_token_ids) == 3 + 2 + 3
    trace = read_trace(tmp_path / "t.jsonl", strict=True)
    stats = {s.phase: s for s in summarize(trace.header, trace.events)}
    assert set(stats) == {"cold", "warm", "all"}
    assert stats["warm"].hits.hit_tokens == 12 and stats["warm"].hits.token_hit_rate == pytest.approx(12 / 13)
    # a's second lookup (after the appended turn) hit its own first turn: 16 of 18 + 2 - 1 matchable tokens
    assert stats["cold"].hits.hit_tokens == 16 and stats["cold"].hits.requests == 2
    # `a` finished twice: its latest run counts
    assert stats["all"].requests == 2 and len(stats["all"].ttft) == 2
    assert "warm" in format_stats(list(stats.values()))


@pytest.mark.parametrize(
    "data,message",
    [
        ({"requests": []}, "non-empty list"),
        ({"requests": [{"prompt": "x", "messages": []}]}, "exactly one of"),
        ({"requests": [{"prompt": "x", "sampling": {"max_tokenz": 3}}]}, "unknown sampling fields"),
        ({"requests": [{"prompt": "x", "sampling": {"max_tokens": 0}}]}, "max_tokens must be at least 1"),
        ({"requests": [{"id": "a", "prompt": "x"}, {"id": "a", "prompt": "y"}]}, "unique"),
        (
            {
                "requests": [{"id": "a", "prompt": "x"}],
                "edits": [{"request_id": "b", "position": 0, "text": "y"}],
            },
            "edits\\[0\\]",
        ),
    ],
)
def test_bad_workloads_say_where(tmp_path, data, message):
    with pytest.raises(WorkloadError, match=message):
        load_workload(write(tmp_path, data))


def test_bad_json_names_the_line(tmp_path):
    path = tmp_path / "w.json"
    path.write_text('{"requests": [\n  {"prompt": "x",}\n]}')
    with pytest.raises(WorkloadError, match="line 2"):
        load_workload(path)


def test_percentiles_and_tpot():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5 and percentile([], 50) is None
    assert tpot([0.0, 1.0, 3.0]) == 1.5 and tpot([1.0]) is None


@pytest.mark.parametrize(
    "request_item,message",
    [
        (1, "a request is an object"),
        ({"prompt": 5}, "prompt must be text"),
        ({"messages": "hello"}, "messages must be a non-empty list"),
        ({"prompt_token_ids": [1, "x"]}, "list of integers"),
        ({"prompt": "x", "arrival_step": "soon"}, "arrival_step"),
    ],
)
def test_badly_typed_requests_are_refused(tmp_path, request_item, message):
    with pytest.raises(WorkloadError, match=message):
        load_workload(write(tmp_path, {"requests": [request_item]}))
