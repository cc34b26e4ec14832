"""The saturated workload: waves of concurrent streamed requests through `kvtui proxy` that fill the server's
pool, make it evict, and make it preempt (tests/integration/vllm_server.py: 128 blocks of 32 tokens).

Each wave sends 8 requests 30 ms apart, each a document of about 480 tokens (15 blocks) and a question, and
asks for 96 tokens: the wave's prompts take about 110 of the 128 blocks, so the running requests' decode runs out
of blocks and vLLM preempts the latest admitted. The first and last request of a wave share a document (the later
one finds it cached); the waves move on through the documents, so the older ones are evicted, and the last wave
comes back to the first wave's documents.

    .venv/bin/python -m tests.integration.waves OUT.jsonl   (its own server; writes OUT.jsonl and
        OUT.events.jsonl through a real `kvtui proxy --attach`)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from tests.integration.vllm_server import free_port
from tests.integration.workload import QUESTIONS, document

WAVES = 3
PER_WAVE = 8
MAX_TOKENS = 96
# the documents of each wave's requests
WAVE_DOCUMENTS = ((0, 1, 2, 3, 4, 5, 6, 0), (4, 5, 7, 8, 9, 10, 11, 4), (0, 1, 2, 12, 13, 14, 15, 12))
# words per document: about 480 tokens
WORDS = 190


def wave_prompts(tokenizer, nonce: str = "") -> list[list[list[int]]]:
    """Each wave's prompts, as token ids."""
    enc = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    out = []
    for w, docs in enumerate(WAVE_DOCUMENTS):
        wave = []
        for k in range(PER_WAVE):
            text = document(docs[k], words=WORDS, nonce=nonce).replace(
                "<|im_end|>", f" {QUESTIONS[k % 3]} (wave {w}, request {k})<|im_end|>", 1
            )
            wave.append(enc(text))
        out.append(wave)
    return out


def stream_body(ids: list[int], max_tokens: int = MAX_TOKENS) -> dict:
    """A greedy streamed completion on token ids that reports usage and returns its ids."""
    return {
        "model": "smollm2",
        "prompt": ids,
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }


def post_stream(url: str, body: dict) -> None:
    req = urllib.request.Request(
        url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        r.read()


def send_waves(url: str, waves: list[list[list[int]]], gap: float = 0.03, pause: float = 1.0) -> int:
    """Each wave's requests `gap` seconds apart, all in flight together; the next wave once it is answered."""
    sent = 0
    for wave in waves:
        threads = [threading.Thread(target=post_stream, args=(url, stream_body(ids))) for ids in wave]
        for t in threads:
            t.start()
            time.sleep(gap)
        for t in threads:
            t.join()
        sent += len(wave)
        time.sleep(pause)
    return sent


class ProxyProcess:
    """`kvtui proxy --attach` as a user runs it, logging to `log` (and the events beside it)."""

    def __init__(self, server, log: Path):
        self.port = free_port()
        root = Path(__file__).resolve().parents[2]
        attach = f"{server.events},replay={server.replay}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvtui", "proxy", "--upstream", server.url]
            + ["--listen", f"127.0.0.1:{self.port}", "--log", str(log), "--attach", attach, "--quiet"],
            cwd=root,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.3)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> str:
        self.proc.send_signal(2)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err.decode("utf-8", "replace")


def capture(server, tokenizer, log: Path, nonce: str = "") -> int:
    """The waves through a real proxy into `log`; the requests recorded."""
    proxy = ProxyProcess(server, log)
    try:
        # the attacher's first frames, before any request
        time.sleep(1.0)
        sent = send_waves(proxy.url, wave_prompts(tokenizer, nonce))
        # the last records and event batches written
        time.sleep(2.0)
    finally:
        proxy.stop()
    return sent


def main(out: Path) -> None:
    from transformers import AutoTokenizer

    from tests.integration.vllm_server import VllmServer, model_dir

    tokenizer = AutoTokenizer.from_pretrained(model_dir())
    running = os.environ.get("KVTUI_VLLM_RUNNING")
    if running:
        port, events, replay = map(int, running.split(",")[:3])
        server = VllmServer(port=port, events_port=events, replay_port=replay, buffer_steps=8)
    else:
        server = VllmServer(buffer_steps=8)
        server.start()
    try:
        nonce = f"Waves {time.time_ns() % 100000}. "
        print(f"wrote {out}: {capture(server, tokenizer, out, nonce)} requests")
    finally:
        if not running:
            server.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
