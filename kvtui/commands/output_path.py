"""Files a command writes: a missing directory is said at once, before any model loads or any work starts."""

from __future__ import annotations

import os

import click


def output_file(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Click callback for an option naming a file to write: its directory must exist and it is no directory."""
    if value is None:
        return None
    path = os.path.expanduser(value)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise click.BadParameter(f"{value} is a directory: give a file name", ctx=ctx, param=param)
    if not os.path.isdir(folder):
        raise click.BadParameter(
            f"{value}: no directory {folder} to write it in (create it first)", ctx=ctx, param=param
        )
    if not os.access(folder, os.W_OK):
        raise click.BadParameter(f"{value}: the directory {folder} is not writable", ctx=ctx, param=param)
    return value
