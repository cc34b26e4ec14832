"""What a simulated run hits beyond the whole-prompt-block figures (kvtui/whatif/beyond.py): partly filled
blocks and blocks of generated tokens, counted from the run, and exactly the difference to the one-pass
curve's ceiling where nothing else differs."""

from __future__ import annotations

from kvtui.whatif.beyond import beyond_line
from kvtui.whatif.onepass import of_workload
from kvtui.whatif.requests import SimRequest, Workload
from kvtui.whatif.simulate import SimConfig, simulate

PROMPT = list(range(1000, 1040))
ANSWER = list(range(2000, 2030))


def _chat() -> Workload:
    """A second turn whose prompt is the first turn's prompt, its answer and a new question."""
    first = SimRequest("turn1", 0.0, PROMPT, ANSWER, len(ANSWER))
    second = SimRequest("turn2", 10.0, PROMPT + ANSWER + list(range(3000, 3010)), None, 4)
    return Workload("chat", "workload", [first, second])


def test_a_second_turn_hits_the_first_turns_answer_as_generated_tokens():
    workload = _chat()
    result = simulate(workload.requests, SimConfig(4096, 16))
    # blocks 2 and 3 of the second prompt (tokens 32-63) hold the first turn's answer; no prompt held them
    assert result.generated_tokens == 32
    ceiling = of_workload(workload, 16).curve().ceiling_tokens
    # the prompt's two whole blocks: what the one-pass model counts
    assert ceiling == 32
    assert result.hit_tokens - result.partial_tokens - result.generated_tokens == ceiling


def test_the_line_says_both_shares_in_points():
    point = {"method": "simulated", "reused_partial_tokens": 5, "generated_hit_tokens": 20}
    assert beyond_line(point, 200) == (
        "simulated may score up to 12.5 points above the whole-prompt-block figures: "
        "partly filled blocks 2.5, generated tokens 10.0"
    )
    assert beyond_line({"method": "one-pass"}, 200) is None


def test_the_table_and_the_ui_header_name_the_models_and_say_how_far_above_the_simulation_may_be():
    """concurrent8 at 1k: 57.1% simulated against 37.8% for both whole-prompt-block figures; the difference is
    the partly filled blocks the simulation reused, measured from the run."""
    import json

    from click.testing import CliRunner

    from kvtui.cli import main
    from kvtui.whatif.report import summary_event
    from kvtui.widgets.whatif_view import headline

    args = ["whatif", "fixtures/traces/concurrent8.jsonl", "--capacity", "1k", "-q"]
    report = json.loads(CliRunner().invoke(main, [*args, "--json"]).stdout)
    simulated = next(p for p in report["points"] if p["method"] == "simulated")
    above = beyond_line(simulated, report["prompt_tokens"])
    partial = 100 * simulated["reused_partial_tokens"] / report["prompt_tokens"]
    assert f"partly filled blocks {partial:.1f}" in above and partial > 15
    table = CliRunner().invoke(main, args).stdout
    assert "optimal (whole prompt blocks)" in table and "one-pass LRU (whole prompt blocks)" in table
    assert f"above     992 lru bs 16: {above}" in table
    shown = headline(summary_event(report, report["current"], {})).plain
    assert "37.8% one-pass LRU (whole prompt blocks), 37.8% optimal (whole prompt blocks)" in shown
    assert above in shown.splitlines()
    # the capacity asked, and what it became
    assert "current 992 lru bs 16 (1k -> 992 tokens (62 blocks of 16))" in shown
