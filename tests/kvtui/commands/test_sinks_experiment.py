"""`kvtui sinks` (kvtui/commands/sinks_commands.py) on a tiny random model: every method scores every token (the
recompute baseline its sampled positions), the table and the plot say what they show."""

from kvtui.commands.sinks_commands import (
    format_plot,
    format_strip,
    format_table,
    reference_text,
    run_experiment,
)
from tests.helpers.tiny_models import random_prompts, tiny_model


def test_the_experiment_scores_every_method_and_prints_streamingllm_s_table():
    model = tiny_model("llama-gqa")
    tokens = random_prompts([80], seed=2)[0]
    results = run_experiment(model, None, "tiny", tokens, window=16, sinks=2, samples=5, say=lambda m: None)
    for method in ("dense", "window", "sinks", "heavy hitters"):
        positions, values = results[method]
        assert positions == list(range(1, 80)) and len(values) == 79
    positions, values = results["recompute"]
    assert len(positions) == len(values) == 5 and min(positions) > 16
    # within the budget nothing differs from dense attention
    for method in ("window", "sinks", "heavy hitters"):
        early = [abs(a - b) for a, b in zip(results[method][1][:14], results["dense"][1][:14])]
        assert max(early) <= 1e-4, method
    table = format_table(results, 16, 2, 80, "tiny")
    assert (
        "0 + 16" in table
        and "2 + 14" in table
        and "8 heavy + 8 recent" in table
        and "not the paper's" in table
    )
    plot = format_plot(results, 8, 80)
    assert "D dense" in plot and "S sinks" in plot and "recompute" not in plot
    assert "heavy hitters" in format_strip(results["_kept"], 80, 2)


def test_the_default_text_is_long_english_installed_with_python():
    text = reference_text()
    assert len(text) > 300_000 and "assignment" in text
