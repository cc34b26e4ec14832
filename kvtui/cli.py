"""`kvtui`: the command-line entry point. With no subcommand it opens the live UI on the embedded model."""

from __future__ import annotations

import functools
import importlib.util

import click

from kvtui import __version__

COMMANDLINE = click.core.ParameterSource.COMMANDLINE

# what `pip install "kvtui[engine]"` adds (plus what transformers brings): viewing needs none of them
ENGINE_MODULES = (
    "torch",
    "transformers",
    "gguf",
    "accelerate",
    "safetensors",
    "huggingface_hub",
    "tokenizers",
)
ENGINE_HINT = 'pip install "kvtui[engine]" (or run ./install.sh)'
# commands that always load a model: checked before they start (live would otherwise open its UI first)
NEEDS_ENGINE = ("live", "generate", "record", "compare-edit", "sinks", "precision")


def missing_engine() -> str | None:
    """The first of torch and transformers that is not installed here, or None. Imports neither."""
    for name in ("torch", "transformers"):
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):
            return name
    return None


def engine_error(command: str, module: str) -> click.ClickException:
    return click.ClickException(f"{command} needs the engine, and {module} is not installed: {ENGINE_HINT}")


class KvtuiGroup(click.Group):
    """The top group: a command that reaches for torch (or another engine package) where the engine extra is
    not installed ends with one line saying how to install it, not a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as exc:
            module = (exc.name or "").split(".")[0]
            if module not in ENGINE_MODULES:
                raise
            raise engine_error(f"kvtui {ctx.invoked_subcommand or 'live'}", module) from None


def _check_engine_first(command: click.Command) -> None:
    callback = command.callback

    @functools.wraps(callback)
    def checked(*args, **kwargs):
        module = missing_engine()
        if module is not None:
            raise engine_error(f"kvtui {command.name}", module)
        return callback(*args, **kwargs)

    command.callback = checked


@click.group(
    cls=KvtuiGroup, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(__version__, prog_name="kvtui")
@click.pass_context
def main(ctx: click.Context, **live_options) -> None:
    """kvtui - see what your KV cache keeps, shares and throws away.

    \b
    Run with no command to open the live UI on the embedded SmolLM2 model; the options below are live's.
    Examples:
      kvtui                                   live UI, embedded model
      kvtui --model gemma3                    live UI, Gemma 3 270M (sliding-window layers)
      kvtui generate "Why is the sky blue?"   stream text, print TTFT/TPOT
      kvtui record --workload fixtures/workloads/concurrent8.json --out t.jsonl
      kvtui replay t.jsonl                    watch a recorded trace
      kvtui attach tcp://127.0.0.1:5557       watch a vLLM / SGLang server's KV events
      kvtui info                              model shape and KV byte arithmetic
      kvtui schema                            the trace file format
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(main.get_command(ctx, "live"), **live_options)
        return
    typed = [p.opts[0] for p in ctx.command.params if ctx.get_parameter_source(p.name) is COMMANDLINE]
    if typed:
        sub = ctx.invoked_subcommand
        raise click.UsageError(
            f"options before `{sub}` are live's ({', '.join(typed)}); put `{sub}`'s own options after its "
            f"name (see `kvtui {sub} --help`)"
        )


def _register() -> None:
    from kvtui.commands import (
        attach_commands,
        bench_commands,
        engine_commands,
        export_commands,
        info_commands,
        precision_commands,
        proxy_commands,
        serve_commands,
        sinks_commands,
        trace_commands,
        ui_commands,
        whatif_commands,
    )

    for command in (
        engine_commands.COMMANDS
        + info_commands.COMMANDS
        + trace_commands.COMMANDS
        + ui_commands.COMMANDS
        + bench_commands.COMMANDS
        + export_commands.COMMANDS
        + serve_commands.COMMANDS
        + attach_commands.COMMANDS
        + proxy_commands.COMMANDS
        + whatif_commands.COMMANDS
        + sinks_commands.COMMANDS
        + precision_commands.COMMANDS
    ):
        main.add_command(command)
    for name in NEEDS_ENGINE:
        _check_engine_first(main.commands[name])
    # `kvtui --model gemma3` is `kvtui live --model gemma3`
    main.params.extend(p for p in main.commands["live"].params if p.name != "help")


_register()
