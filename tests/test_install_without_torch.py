"""`pip install kvtui` with no extras is enough to view: in a fresh venv holding kvtui alone (a real,
non-editable install of this repository, so the package contents are what is tested) torch cannot be imported,
and replay, stats, export and attach work; an engine command there fails with one line saying what to install.

The venv is built once per module (about a minute; the dependencies come from PyPI). Where pip cannot reach
the registry the module is skipped and says so. `-m "not install"` deselects it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.install

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "fixtures" / "traces" / "chat.jsonl"
# what the wheel is built from (a copy: building in place would leave build/ and egg-info in the working tree)
SOURCES = ("pyproject.toml", "README.md", "engine", "kvtui")
OFFLINE = (
    "NewConnectionError",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "ProxyError",
    "Failed to establish a new connection",
)
HINT = 'needs the engine, and torch is not installed: pip install "kvtui[engine]" (or run ./install.sh)'


class Venv:
    def __init__(self, path: Path, work: Path):
        self.path, self.work = path, work
        self.python = path / "bin" / "python"
        self.kvtui = path / "bin" / "kvtui"
        # nothing of this checkout may leak in: no PYTHONPATH, and the commands run outside the repository
        self.env = {
            k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
        }

    def run(self, *args, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(a) for a in args],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
        )

    def cli(self, *args, timeout: float = 120) -> subprocess.CompletedProcess:
        return self.run(self.kvtui, *args, timeout=timeout)


def _copy_sources(dest: Path) -> None:
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=skip)
        else:
            shutil.copy2(source, dest / name)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Venv:
    base = tmp_path_factory.mktemp("install")
    src, work = base / "src", base / "work"
    src.mkdir()
    work.mkdir()
    _copy_sources(src)
    env = Venv(base / "venv", work)
    subprocess.run([sys.executable, "-m", "venv", str(env.path)], check=True, timeout=120)
    # not --quiet: pip's retry warnings are what tell an unreachable registry from a broken package
    result = env.run(env.python, "-m", "pip", "install", "--disable-pip-version-check", src, timeout=900)
    if result.returncode != 0:
        output = result.stdout + result.stderr
        said = [line.strip() for line in output.splitlines() if any(marker in line for marker in OFFLINE)]
        if said:
            pytest.skip(f"pip cannot reach the package registry: {said[-1][:300]}")
        pytest.fail(f"pip install {src} failed:\n{output[-4000:]}")
    return env


def test_kvtui_alone_has_no_torch(venv):
    for module in ("torch", "transformers"):
        result = venv.run(venv.python, "-c", f"import {module}")
        assert result.returncode != 0 and "ModuleNotFoundError" in result.stderr, (module, result.stderr)
    code = "import engine, kvtui; print(kvtui.__file__); print(engine.__file__)"
    result = venv.run(venv.python, "-c", code)
    assert result.returncode == 0, result.stderr
    for line in result.stdout.splitlines():
        assert Path(line).is_relative_to(venv.path), f"imported from outside the venv: {line}"


def test_the_install_holds_every_module_and_the_styles(venv):
    code = "import kvtui, pathlib; print(pathlib.Path(kvtui.__file__).parents[1])"
    site = venv.run(venv.python, "-c", code)
    installed = Path(site.stdout.strip())
    src = venv.path.parent / "src"
    wanted = {
        p.relative_to(src)
        for name in ("engine", "kvtui")
        for p in (src / name).rglob("*")
        if p.is_file() and p.suffix in (".py", ".tcss")
    }
    missing = sorted(str(p) for p in wanted if not (installed / p).is_file())
    assert not missing, f"not in the installed package: {missing}"


def test_replay_check_and_stats(venv):
    result = venv.cli("replay", TRACE, "--check")
    assert result.returncode == 0 and "177 events" in result.stdout, result.stdout + result.stderr
    result = venv.cli("stats", TRACE)
    assert result.returncode == 0 and "TTFT" in result.stdout, result.stdout + result.stderr
    result = venv.cli("stats", "--json", TRACE)
    assert result.returncode == 0 and "ttft_s" in json.dumps(json.loads(result.stdout)), result.stderr


def test_the_replay_ui_runs_from_the_installed_package(venv):
    script = f"""
import asyncio, sys
from kvtui.app import KvtuiApp


async def main():
    app = KvtuiApp(source={str(TRACE)!r}, trace_path={str(TRACE)!r}, open_interesting=True, frame_rate=None)
    async with app.run_test(size=(100, 32)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.timeline is not None and app.loading is None
        await pilot.press("ctrl+home", "full_stop", "full_stop", "2")
        await pilot.pause()
        assert app.cursor == 2, app.cursor


asyncio.run(main())
leaked = sorted(name for name in sys.modules if name.split(".")[0] in ("torch", "transformers"))
assert not leaked, leaked
print("replay ui ok")
"""
    result = venv.run(venv.python, "-c", script)
    assert result.returncode == 0 and "replay ui ok" in result.stdout, result.stderr[-4000:]


def test_export_perfetto(venv):
    out = venv.work / "chat.pftrace"
    result = venv.cli("export", TRACE, "--perfetto", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert out.stat().st_size > 1000


def _publishers():
    spec = importlib.util.spec_from_file_location(
        "attach_publishers", ROOT / "tests" / "kvtui" / "sources" / "attach_publishers.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_attach_headless_on_loopback(venv):
    pubs = _publishers()
    loop = "tcp://127.0.0.1:*"
    publisher = pubs.Publisher(loop, replay=loop)
    # history the late joiner fetches from the replay endpoint
    stored = pubs.VBlockStored([11, 12], None, [1, 2, 3, 4], 2, None, "GPU", None)
    publisher.publish(pubs.VBatch(0.0, [stored], 0), send=False)
    out = venv.work / "fleet.jsonl"
    try:
        result = venv.cli(
            "attach",
            f"{publisher.endpoint},replay={publisher.replay},name=w",
            "--headless",
            "--duration",
            "2",
            "-o",
            out,
            "--explain",
            "1 2 3 9 5",
        )
    finally:
        publisher.close()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "w: 1 block(s) = 2/5 tokens cached" in result.stdout + result.stderr, result.stdout + result.stderr
    result = venv.cli("replay", out, "--check")
    assert result.returncode == 0 and "events" in result.stdout, result.stdout + result.stderr


def test_serve_and_schema_load(venv):
    assert venv.cli("serve", "--help").returncode == 0
    result = venv.cli("schema")
    assert result.returncode == 0 and "block_allocated" in result.stdout, result.stderr


@pytest.mark.parametrize(
    "args",
    [["generate", "hi"], [], ["info"], ["bench", "long"]],
    ids=["generate", "live", "info", "bench-long"],
)
def test_an_engine_command_says_what_to_install(venv, args):
    # live: stdin is not a terminal, so a UI that opened anyway would fail (or hang until the timeout)
    result = venv.cli(*args, timeout=60)
    name = "kvtui " + (args[0] if args else "live")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.strip() == f"Error: {name} {HINT}", result.stderr
