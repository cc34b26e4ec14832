"""`kvtui serve`: the same UI in a web browser, through textual-serve (each browser tab runs its own kvtui)."""

from __future__ import annotations

import shlex
import sys

import click

UI_COMMANDS = ("live", "replay")


def served_command(args: tuple[str, ...]) -> str:
    """The shell command textual-serve starts for each browser tab: this Python running `kvtui ARGS`."""
    return shlex.join([sys.executable, "-m", "kvtui", *args])


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (0.0.0.0: every interface; anyone who reaches it gets the UI).",
)
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--public-url",
    default=None,
    help="URL the browser uses, when it differs from http://HOST:PORT (behind a proxy).",
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve(host, port, public_url, args):
    """Serve the kvtui UI in a web browser: open http://HOST:PORT.

    ARGS is the kvtui UI command to serve, `live` (the default) or `replay TRACE`, with its options. Every
    browser tab starts its own kvtui process: with `live`, its own engine and model.

    \b
    Examples:
      kvtui serve replay fixtures/traces/chat.jsonl      a recorded trace at http://127.0.0.1:8000
      kvtui serve --port 9000 live --model smollm2       the live UI
      kvtui serve --host 0.0.0.0 replay t.jsonl          reachable from other machines (no authentication)
    """
    args, host, port, public_url = _own_options(tuple(args), host, port, public_url)
    if public_url is not None and not public_url.startswith(("http://", "https://")):
        raise click.BadParameter(
            f"{public_url!r}: give the URL the browser opens, http(s)://HOST[:PORT][/PATH]",
            param_hint="--public-url",
        )
    args = args or ("live",)
    if args[0] not in UI_COMMANDS:
        raise click.UsageError(f"kvtui serve serves a UI command: 'live' or 'replay TRACE', not {args[0]!r}")
    if args[0] == "replay":
        _check_replay(args[1:])
    _check_port_free(host, port)
    from textual_serve.server import Server

    title = "kvtui " + " ".join(args)
    server = Server(served_command(args), host=host, port=port, title=title, public_url=public_url)
    click.echo(f"kvtui: serving `{title}` at {server.public_url} (ctrl+c stops)", err=True)
    try:
        server.serve()
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None


# serve's own options, wherever they stand: `kvtui serve replay T --port 9000` serves on 9000
_OWN = {"--host": "host", "--port": "port", "--public-url": "public_url"}


def _own_options(args: tuple[str, ...], host: str, port: int, public_url: str | None):
    """Take --host, --port and --public-url out of the served command's arguments: they are serve's."""
    values = {"host": host, "port": port, "public_url": public_url}
    rest: list[str] = []
    i = 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name not in _OWN:
            rest.append(args[i])
            i += 1
            continue
        if not eq:
            if i + 1 >= len(args):
                raise click.UsageError(f"{name} needs a value")
            value = args[i + 1]
            i += 1
        i += 1
        if name == "--port":
            try:
                value = int(value)
            except ValueError:
                raise click.BadParameter(f"{value!r} is not a port number", param_hint="--port") from None
            if not 1 <= value <= 65535:
                raise click.BadParameter(f"{value} is not in the range 1-65535", param_hint="--port")
        values[_OWN[name]] = value
    return tuple(rest), values["host"], values["port"], values["public_url"]


def _check_port_free(host: str, port: int) -> None:
    """A port another program holds: one line now, not textual-serve's traceback."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise click.BadParameter(f"{host!r}: no such address ({exc.strerror})", param_hint="--host") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise click.ClickException(
                f"port {port} on {host} is in use ({exc.strerror}): stop what holds it, or pick another "
                "with --port"
            ) from None


def _check_replay(rest: tuple[str, ...]) -> None:
    """Refuse a missing or unreadable trace now, not in each browser tab."""
    import os

    from engine.trace.opening import problem_line
    from kvtui.app.loader import read_header

    traces = [a for a in rest if not a.startswith("-")]
    if not traces:
        raise click.UsageError("kvtui serve replay needs a TRACE file")
    if not os.path.isfile(traces[0]):
        raise click.UsageError(f"{traces[0]}: no such trace file")
    header, error = read_header(traces[0])
    if header is None:
        raise click.ClickException(problem_line(traces[0], error))


COMMANDS = [serve]
