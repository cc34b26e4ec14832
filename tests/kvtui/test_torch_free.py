"""Viewing needs no torch: stats, schema, replay and the replay UI work where torch and transformers are missing.

The check runs in a fresh interpreter whose import system refuses `torch` and `transformers` (and their
submodules), as on a machine where they were never installed; this process has them imported already.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BLOCKER = '''
import importlib.abc
import sys

BLOCKED = ("torch", "transformers")


class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked: viewing a trace must not need torch or transformers")
        return None


sys.meta_path.insert(0, NoTorch())
'''

VIEWER = '''
import asyncio

from click.testing import CliRunner

from kvtui.cli import main

TRACE = "fixtures/traces/edit_series.jsonl"


def cli(*args):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, (args, result.output)
    return result.output


assert "TTFT" in cli("stats", TRACE)
assert '"ttft_s"' in cli("stats", "--json", TRACE)
assert "block_allocated" in cli("schema")
assert "Replay a recorded trace" in cli("replay", "--help")
assert "events" in cli("replay", TRACE, "--check")
assert "kvtui bench ui" in cli("bench", "--help")
import tempfile, os
with tempfile.TemporaryDirectory() as tmp:
    cli("export", TRACE, "--perfetto", os.path.join(tmp, "t.pftrace"))
    assert os.path.getsize(os.path.join(tmp, "t.pftrace")) > 1000
assert "web browser" in cli("serve", "--help")

from kvtui.loader import load_trace
from kvtui.state import replay

loaded = load_trace(TRACE)
assert loaded.error is None and loaded.events
state = replay(loaded.header, loaded.events)
assert state.requests

from kvtui.app import KvtuiApp


async def run_app():
    app = KvtuiApp(source=TRACE, trace_path=TRACE, open_interesting=True, frame_rate=None)
    async with app.run_test(size=(100, 32)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.timeline is not None and app.loading is None
        await pilot.press("ctrl+home", "full_stop", "full_stop", "2", "3")
        await pilot.pause()
        assert app.cursor == 2, app.cursor


asyncio.run(run_app())
leaked = sorted(name for name in sys.modules if name.split(".")[0] in BLOCKED)
assert not leaked, leaked
print("torch-free viewing ok")
'''


def run_without_torch(code: str) -> subprocess.CompletedProcess:
    script = textwrap.dedent(BLOCKER) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_blocker_blocks():
    result = run_without_torch("import engine.engine\n")
    assert result.returncode != 0 and "torch is blocked" in result.stderr, result.stderr


def test_stats_schema_replay_and_the_replay_ui_need_no_torch():
    result = run_without_torch(VIEWER)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr[-4000:]}"
    assert "torch-free viewing ok" in result.stdout
