"""`kvtui` alone opens live, so `kvtui --model gemma3` is `kvtui live --model gemma3`; live's options typed before
another command are refused in one line, not dropped."""

from __future__ import annotations

from click.testing import CliRunner

from kvtui.cli import main


def test_the_root_command_takes_the_live_options(monkeypatch):
    seen = {}
    monkeypatch.setattr(main.commands["live"], "callback", lambda **options: seen.update(options))
    result = CliRunner().invoke(main, ["--model", "gemma3", "--max-tokens", "8", "--whole-blocks"])
    assert result.exit_code == 0, result.output
    assert (seen["model"], seen["max_tokens"], seen["partial_hits"]) == ("gemma3", 8, False)
    # and the defaults are live's own
    seen.clear()
    assert CliRunner().invoke(main, []).exit_code == 0
    assert (seen["model"], seen["max_tokens"], seen["block_size"]) == ("smollm2", 64, 16)


def test_live_options_before_another_command_are_refused():
    result = CliRunner().invoke(main, ["--model", "gemma3", "info"])
    assert result.exit_code == 2
    assert (
        "options before `info` are live's (--model); put `info`'s own options after its name" in result.output
    )
