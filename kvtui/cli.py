"""`kvtui`: the command-line entry point. With no subcommand it opens the live UI on the embedded model."""

from __future__ import annotations

import click

from kvtui import __version__


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kvtui")
@click.pass_context
def main(ctx: click.Context) -> None:
    """kvtui - see what your KV cache keeps, shares and throws away.

    \b
    Run with no command to open the live UI on the embedded SmolLM2 model.
    Examples:
      kvtui                                   live UI, embedded model
      kvtui generate "Why is the sky blue?"   stream text, print TTFT/TPOT
      kvtui record --workload fixtures/workloads/concurrent8.json --out t.jsonl
      kvtui replay t.jsonl                    watch a recorded trace
      kvtui attach tcp://127.0.0.1:5557       watch a vLLM / SGLang server's KV events
      kvtui info                              model shape and KV byte arithmetic
      kvtui schema                            the trace file format
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(main.get_command(ctx, "live"))


def _register() -> None:
    from kvtui.commands import (attach_commands, bench_commands, engine_commands, export_commands,
                                serve_commands, ui_commands)

    for command in (engine_commands.COMMANDS + ui_commands.COMMANDS + bench_commands.COMMANDS
                    + export_commands.COMMANDS + serve_commands.COMMANDS + attach_commands.COMMANDS):
        main.add_command(command)


_register()
