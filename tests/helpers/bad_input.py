"""What a user error must look like on the command line: a non-zero exit, no traceback, and the message on one
line (tests/kvtui/test_cli_errors.py, tests/kvtui/commands/test_bad_inputs.py)."""

from __future__ import annotations

from pathlib import Path


def write_files(folder: Path, made: dict[str, bytes]) -> dict[str, str]:
    """Write each name -> bytes under `folder` (a name may hold a directory); name's first part -> its path."""
    for name, data in made.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return {name.split("/")[0]: str(folder / name.split("/")[0]) for name in made}


def fill(args: list[str], files: dict[str, str]) -> list[str]:
    """`args` with each {name} replaced by its file's path."""
    for name, path in files.items():
        args = [arg.replace("{" + name + "}", path) for arg in args]
    return args


def assert_one_line_error(result, message: str) -> None:
    assert result.exit_code not in (0, None), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    said = [line for line in result.output.splitlines() if message in line]
    # the message is one line
    assert len(said) == 1, result.output
    assert len([line for line in result.output.splitlines() if line.startswith("Error")]) <= 1
