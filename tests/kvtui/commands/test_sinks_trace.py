"""`kvtui sinks --trace` (kvtui/commands/sinks_trace.py): the experiment's caches as a trace whose reducer state
is, sample by sample, what the experiment itself kept; and the command on a tiny random model."""

from pathlib import Path

from click.testing import CliRunner

from engine.trace import read_trace
from kvtui.cli import main
from kvtui.commands.sinks_commands import reference_text, run_experiment
from kvtui.commands.sinks_trace import (
    default_every,
    query_positions,
    sample_ends,
    sinks_trace,
    write_trace,
)
from kvtui.state import CacheState
from tests.helpers.tiny_models import random_prompts, tiny_model

N, W, S, EVERY, LAYER = 80, 16, 2, 3, 1


def traced_experiment():
    model = tiny_model("llama-gqa")
    tokens = random_prompts([N], seed=2)[0]
    results = run_experiment(
        model,
        None,
        "tiny",
        tokens,
        window=W,
        sinks=S,
        samples=2,
        say=lambda m: None,
        trace_layer=LAYER,
        trace_at=query_positions(N, EVERY),
    )
    header, events = sinks_trace(results["_header"], tokens, results["_texts"], W, S, results["_kept"], EVERY)
    return results["_kept"], header, events


def held(ring) -> list[int]:
    return sorted(p for p in ring.slots if p >= 0)


def test_the_reducer_holds_what_each_cache_kept_sample_by_sample():
    run, header, events = traced_experiment()
    assert run.heavy == W // 2 and run.recent == W - W // 2
    state = CacheState({"type": "header", "schema": 1, **header})
    checked = 0
    for event in events:
        state.apply(event)
        if event["type"] != "step":
            continue
        end = sample_ends(N, EVERY)[event["step"]]
        # H2O: exactly the set the experiment's own mask let query end - 1 read, in its own layer
        heavy = state.rings[("heavy-hitters", 0)]
        assert held(heavy) == run.history[end - 1] and len(heavy.slots) == W
        roles = {p: heavy.role_of(p) for p in held(heavy)}
        # heavy: kept for its attention, outside the recent window, once the budget has filled and keys go
        chosen = end > W
        assert all((role == "heavy") == (chosen and p < end - run.recent) for p, role in roles.items())
        assert all(role in ("heavy", "recent") for role in roles.values())
        # the window: the last W positions; sinks: the first S and the last W - S
        assert held(state.rings[("window", 0)]) == list(range(max(0, end - W), end))
        sinks = state.rings[("sinks", 0)]
        assert held(sinks) == sorted({*range(min(S, end)), *range(max(S, end - (W - S)), end)})
        assert [sinks.role_of(p) for p in range(min(S, end))] == ["sink"] * min(S, end)
        checked += 1
    assert checked == len(sample_ends(N, EVERY)) == -(-N // EVERY)
    # past the budget H2O keeps heavy hitters outside the recent window, and after the last token it drops one
    last = run.history[N - 1]
    assert any(p < N - run.recent for p in last) and len(last) == W
    end_kept = run.kept[LAYER][0].nonzero()[:, 0].tolist()
    assert set(end_kept) <= set(last) and len(last) - len(end_kept) == 1


def test_the_trace_is_valid_and_a_long_text_is_sampled(tmp_path):
    _, header, events = traced_experiment()
    path = tmp_path / "sinks.jsonl"
    write_trace(str(path), header, events)
    trace = read_trace(str(path), strict=True)
    assert trace.header["kind"] == "sinks" and trace.header["sinks"]["every"] == EVERY
    assert [e["seq"] for e in trace.events] == list(range(len(events)))
    kept = [e for e in trace.events if e["type"] == "ring_kept"]
    assert kept and all(e["layer"] == LAYER and len(e["kept"]) <= W for e in kept)
    # a long text: at most 256 samples, the last one at the text's end
    assert default_every(2048) == 8 and len(sample_ends(2048, 8)) == 256
    assert sample_ends(2049, default_every(2049))[-1] == 2049 and len(sample_ends(100, 1)) == 100


def test_kvtui_sinks_writes_a_trace_that_replay_opens_with_the_three_caches(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(reference_text()[:3000])
    out = tmp_path / "sinks.jsonl"
    args = [
        "sinks",
        str(text),
        "--model",
        "random:llama:tiny",
        "-W",
        "24",
        "-S",
        "4",
        "--tokens",
        "100",
        "--samples",
        "2",
        "--trace",
        str(out),
        "--trace-layer",
        "1",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert f"kvtui replay {out}" in result.output and "heavy hitters of layer 1" in result.output
    trace = read_trace(str(out), strict=True)
    state = CacheState(trace.header)
    state.apply_all(trace.events)
    assert set(state.rings) == {("window", 0), ("sinks", 0), ("heavy-hitters", 0)}
    assert state.rings[("heavy-hitters", 0)].layer == 1 and state.rings[("sinks", 0)].sinks == 4
    # a layer the model lacks, and a trace into a missing directory, are refused before any work
    bad = CliRunner().invoke(main, args[:-1] + ["7"])
    assert bad.exit_code == 2 and "layers 0-1, not 7" in bad.output
    missing = CliRunner().invoke(main, ["sinks", "--trace", str(Path(tmp_path, "no", "t.jsonl"))])
    assert missing.exit_code == 2 and "no directory" in missing.output


def test_each_cache_finishes_when_its_text_is_scored():
    _, header, events = traced_experiment()
    state = CacheState({"type": "header", "schema": 1, **header})
    state.apply_all(events)
    assert {rid: req.status for rid, req in state.requests.items()} == {
        "window": "finished",
        "sinks": "finished",
        "heavy-hitters": "finished",
    }
