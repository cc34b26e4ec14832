"""The engine options make the EngineConfig they say: --retention-interval's `all` keeps every window block."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from kvtui.commands.engine_options import engine_config, engine_options


@click.command()
@engine_options
def show(**options):
    config = engine_config(**options)
    click.echo(f"{config.window_layout} {config.retention_interval!r}")


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        ([], "ring 0"),
        (["--window-layout", "paged"], "paged 0"),
        (["--window-layout", "paged", "--retention-interval", "64"], "paged 64"),
        (["--window-layout", "paged", "--retention-interval", "all"], "paged None"),
    ],
)
def test_the_retention_interval_reaches_the_config(args, shown):
    result = CliRunner().invoke(show, args)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == shown
