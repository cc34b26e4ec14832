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

BLOCKER = """
import importlib.abc
import sys

BLOCKED = ("torch", "transformers")


class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            # what Python raises for a package that is not installed (kvtui's CLI looks at its .name)
            raise ModuleNotFoundError(f"{name} is blocked: viewing a trace must not need torch or transformers",
                                      name=name)
        return None


sys.meta_path.insert(0, NoTorch())
"""

VIEWER = """
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

from kvtui.app.loader import load_trace
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
"""


def run_without_torch(code: str) -> subprocess.CompletedProcess:
    script = textwrap.dedent(BLOCKER) + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_the_blocker_blocks():
    result = run_without_torch("import engine.engine\n")
    assert result.returncode != 0 and "torch is blocked" in result.stderr, result.stderr


def test_stats_schema_replay_and_the_replay_ui_need_no_torch():
    result = run_without_torch(VIEWER)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr[-4000:]}"
    assert "torch-free viewing ok" in result.stdout


ATTACH = """
import asyncio, os, sys, tempfile, threading, time

import msgspec
import zmq
from click.testing import CliRunner

from kvtui.cli import main

ctx = zmq.Context.instance()
pub, router = ctx.socket(zmq.PUB), ctx.socket(zmq.ROUTER)
pub.bind("tcp://127.0.0.1:*")
router.bind("tcp://127.0.0.1:*")
endpoint, replay = (s.getsockopt_string(zmq.LAST_ENDPOINT) for s in (pub, router))
payload = msgspec.msgpack.encode([0.0, [{"type": "BlockStored", "block_hashes": [2**64 - 3], "parent_block_hash": None,
                                         "token_ids": [1, 2], "block_size": 2, "lora_id": None, "medium": "GPU",
                                         "lora_name": None}], 0])


def serve():  # the replay endpoint answers the late joiner with batch 0
    client, _, start = router.recv_multipart()
    router.send_multipart([client, b"", b"", (0).to_bytes(8, "big"), payload])
    router.send_multipart([client, b"", b"", b"\\xff" * 8, b""])


threading.Thread(target=serve, daemon=True).start()
out = os.path.join(tempfile.mkdtemp(), "fleet.jsonl")
result = CliRunner().invoke(main, ["attach", f"{endpoint},replay={replay},name=w", "--headless", "--duration",
                                   "1", "-o", out, "--explain", "1 2 3"], catch_exceptions=False)
assert result.exit_code == 0 and "w: 1 block(s) = 2/3 tokens cached" in result.output, result.output
result = CliRunner().invoke(main, ["replay", out, "--check"], catch_exceptions=False)
assert result.exit_code == 0, result.output

from kvtui.app.fleet_app import FleetApp
from kvtui.app.loader import load_trace

loaded = load_trace(out)


async def run_app():
    app = FleetApp(source=out, header=loaded.header, events=loaded.events, frame_rate=None)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("2", "1")
        await pilot.pause()
        assert app.fleet.workers["w"].resident == 1


asyncio.run(run_app())
leaked = sorted(name for name in sys.modules if name.split(".")[0] in BLOCKED)
assert not leaked, leaked
print("torch-free attach ok")
"""


def test_attach_and_its_replay_need_no_torch():
    result = run_without_torch(ATTACH)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr[-4000:]}"
    assert "torch-free attach ok" in result.stdout


ENGINE_COMMANDS = """
from click.testing import CliRunner

from kvtui.cli import main

HINT = 'needs the engine, and torch is not installed: pip install "kvtui[engine]" (or run ./install.sh)'
for args in ([], ["live"], ["generate", "hi"], ["record", "-w", "fixtures/workloads/concurrent8.json", "-o", "t.jsonl"], ["info"],
             ["compare-edit", "a b", "-p", "1", "-t", "c"], ["bench"], ["bench", "long"]):
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    name = "kvtui " + (" ".join(args[:1]) or "live")
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and lines[-1] == f"Error: {name} {HINT}", (args, result.output)
    assert "Traceback" not in result.output, (args, result.output)
print("engine commands say what to install")
"""


def test_an_engine_command_without_torch_says_what_to_install():
    result = run_without_torch(ENGINE_COMMANDS)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr[-4000:]}"
    assert "engine commands say what to install" in result.stdout
