"""`kvtui bench whatif --scale`'s parts: a case is the what-if command in a process of its own, timed whole,
with that process's own peak memory (not the forking parent's), and its points read back for comparison."""

from __future__ import annotations

from pathlib import Path

from kvtui.bench.whatif_scale import peak_rss, points_of, run_case

ROOT = Path(__file__).resolve().parents[3]


def test_a_case_is_timed_whole_with_its_own_peak_memory():
    trace = ROOT / "fixtures/traces/shared_system_8users.jsonl"
    seconds, peak, text = run_case(ROOT, trace, ["--capacity", "256,1k", "--method", "one-pass"])
    assert seconds > 0
    # a Python process with kvtui imported, far from this test process's own size or zero
    assert 10e6 < peak < 1e9
    assert [p[:2] for p in points_of(text)] == [(256, "one-pass"), (992, "one-pass")]


def test_peak_memory_of_a_process_that_is_gone_is_unknown():
    assert peak_rss(2**22 + 12345) == 0
