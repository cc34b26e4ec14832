"""`kvtui whatif --method one-pass --ui` shows the one-pass misses of the current configuration, not "no missed
prompt tokens"."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from kvtui.app.whatif_app import WhatIfApp
from kvtui.cli import main
from kvtui.widgets.whatif_view import cause_bars

WORKLOAD = str(Path(__file__).resolve().parents[3] / "fixtures" / "traces" / "shared_system_8users.jsonl")


def test_one_pass_ui_names_its_missed_tokens(monkeypatch):
    seen = {}

    def run(self):
        seen["summary"] = self.job(lambda label: lambda index, sim_t: None)

    monkeypatch.setattr(WhatIfApp, "run", run)
    result = CliRunner().invoke(
        main, ["whatif", WORKLOAD, "--capacity", "32", "--method", "one-pass", "--ui"]
    )
    assert result.exit_code == 0, result.output
    summary = seen["summary"]
    (point,) = [p for p in summary["points"] if p["method"] == "one-pass"]
    missed = summary["prompt_tokens"] - round(point["token_hit_rate"] * summary["prompt_tokens"])
    assert missed > 0 and sum(summary["misses"].values()) == missed
    text = cause_bars(summary["misses"], summary["prompt_tokens"]).plain
    assert "no missed prompt tokens" not in text and "capacity" in text and "compulsory or structural" in text
