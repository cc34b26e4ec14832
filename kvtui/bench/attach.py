"""Sustained attach ingest with the UI open: `kvtui bench attach [--rate 150000] [--seconds 10]`.

A publisher in another process (as a vLLM / SGLang server is) sends SGLang-style batches over ZeroMQ on
loopback, paced at --rate block events per second: one hash per BlockStored (16 token ids, chained on the
previous block of its 32-block prompt), and once the pool of --pool blocks is full one BlockRemoved of the
oldest block per store. As `kvtui attach` runs: the real collector process (SUB socket, sequence tracking,
decode, events, fold) and this process's real FleetApp, headless at 200x60 with its 30 frames/s timer, drawing
the views the collector sends; the tabs are cycled once a second. Every frame is timed as `tick` (take the
latest view, ask for the next, refresh) + the screen update, as `kvtui bench live` does.

Reported: offered, sent (what the publisher managed, on the same 2 cores), received (collector) and applied (folded and shown in the UI's last view) block events per
second, the backlog (offered by the end, not yet shown), frame time p50/p95/max under load and, as the same
run's baseline, for the IDLE seconds before the publisher starts (same tab switches, nothing arriving), and a
throughput baseline from the same run (the mean of one before and one after): decode + events + fold of the
same payloads in one thread with no sockets and no UI (one core's ceiling for this Python code: the
collector's, which shares the machine with the UI and the publisher).
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import time

import msgspec

# frame times reported as `kvtui bench live` reports them
from kvtui.bench.live import _pcts
from kvtui.sources.collector import FREEZE_EVERY

BLOCK = 16
# seconds the UI runs before the publisher starts (frame times with nothing arriving)
IDLE = 4.0
CHAIN = 32
# events per message (a server's step publishes a batch)
BATCH = 500


def make_batches(n_blocks: int, pool: int, run: int = 1, seed: int = 0) -> list[bytes]:
    """Encoded payloads with `n_blocks` block events in all: BlockStored events of `run` chained blocks each
    (SGLang: 1; vLLM stores a run of a prompt's blocks in one event), and once `pool` blocks are resident one
    BlockRemoved of the oldest block per block stored (one hash per event, as vLLM removes)."""
    from collections import deque

    encode = msgspec.msgpack.Encoder().encode
    out, batch, live = [], [], deque()
    h = seed * 10_000_000 + 1
    made = 0
    parent = None
    while made < n_blocks:
        hashes = list(range(h, h + run))
        batch.append(
            {
                "type": "BlockStored",
                "block_hashes": hashes,
                "parent_block_hash": parent,
                "token_ids": [(x * 7 + i) % 50_000 for x in hashes for i in range(BLOCK)],
                "block_size": BLOCK,
                "lora_id": None,
                "medium": "GPU",
            }
        )
        live.extend(hashes)
        h += run
        parent = None if (h // run) % (CHAIN // run or 1) == 0 else hashes[-1]
        made += run
        while len(live) > pool:
            batch.append({"type": "BlockRemoved", "block_hashes": [live.popleft()], "medium": "GPU"})
            made += 1
        if len(batch) >= BATCH:
            out.append(encode([time.time(), batch, 0]))
            batch = []
    if batch:
        out.append(encode([time.time(), batch, 0]))
    return out


def _publisher(
    endpoint: str, rate: float, seconds: float, pool: int, run: int, ready, port_out, idle: float = 0.0
) -> None:
    import zmq

    ctx = zmq.Context()
    # a PUB that also reports the subscriber joining
    pub = ctx.socket(zmq.XPUB)
    pub.set_hwm(1_000_000)
    pub.bind(endpoint)
    port_out.put(pub.getsockopt_string(zmq.LAST_ENDPOINT))
    payloads = make_batches(int(rate * seconds), pool, run)
    # block events per message
    per_message = rate * seconds / max(1, len(payloads))
    # the subscription
    pub.recv()
    ready.set()
    # the UI's frames with nothing arriving first: the same run's baseline for frame times
    time.sleep(idle)
    start = time.perf_counter()
    for seq, payload in enumerate(payloads):
        due = start + seq * per_message / rate
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        pub.send_multipart((b"", seq.to_bytes(8, "big"), payload))
    # what it managed to offer (a busy machine)
    port_out.put(rate * seconds / (time.perf_counter() - start))
    time.sleep(1.0)
    pub.close(linger=2000)
    ctx.term()


def baseline(n_events: int, pool: int, run: int = 1) -> float:
    """Block events per second through decode + events + fold, one thread, no sockets, no UI."""
    from engine.trace import TraceSink
    from kvtui.sources.attach import stamp
    from kvtui.sources.wire import decode_payload
    from kvtui.state.fleet import FleetState

    payloads = make_batches(n_events, pool, run, seed=1)
    fleet, sink = FleetState({}), TraceSink()
    # as the collector folds: a message's events at once
    sink.batch_listeners.append(fleet.apply_all)
    blocks = 0
    t0 = frozen = time.perf_counter()
    for wire_seq, payload in enumerate(payloads):
        # and its garbage-collector policy
        if time.perf_counter() - frozen >= FREEZE_EVERY:
            gc.freeze()
            frozen = time.perf_counter()
        batch = decode_payload(payload)
        stamp(batch, "w", wire_seq, round(sink.now(), 6))
        sink.emit_events(batch.events)
        blocks += batch.blocks
    rate = blocks / (time.perf_counter() - t0)
    del fleet, sink
    gc.unfreeze()
    return rate


def run(rate: float, seconds: float, pool: int, run: int = 1, size: tuple[int, int] = (200, 60)) -> dict:
    from textual.screen import Screen

    from kvtui.app.fleet_app import FleetApp
    from kvtui.sources.attach import attach_header
    from kvtui.sources.collector import CollectorClient
    from kvtui.sources.endpoints import parse_source

    out: dict = {"_baseline_before": baseline(min(int(rate * seconds), 300_000), pool, run)}
    mp = multiprocessing.get_context("spawn")
    ready, ports = mp.Event(), mp.Queue()
    proc = mp.Process(
        target=_publisher,
        args=("tcp://127.0.0.1:*", rate, seconds, pool, run, ready, ports, IDLE),
        daemon=True,
    )
    proc.start()
    endpoint = ports.get(timeout=60)
    sources = [parse_source(f"{endpoint},name=bench")]
    # as `kvtui attach` runs
    collector = CollectorClient(sources, attach_header(sources, None))
    app = FleetApp(source="bench", collector=collector, frame_rate=30.0)
    ticks, frames, idle_frames = [], [], []
    state = {"last_tick": 0.0, "on": False, "frames": frames}
    original_tick, original_paint = app.tick, Screen._on_timer_update

    def timed_tick() -> None:
        t0 = time.perf_counter()
        original_tick()
        state["last_tick"] = time.perf_counter() - t0
        if state["on"]:
            ticks.append(state["last_tick"])

    def timed_paint(screen) -> None:
        t0 = time.perf_counter()
        original_paint(screen)
        if state["on"]:
            state["frames"].append(state["last_tick"] + time.perf_counter() - t0)
            state["last_tick"] = 0.0

    app.tick = timed_tick
    Screen._on_timer_update = timed_paint

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            if not ready.wait(60):
                raise SystemExit("the publisher did not see the subscriber within 60 s")
            state["on"] = True
            for phase, span in (("idle", IDLE), ("load", seconds)):
                state["frames"] = idle_frames if phase == "idle" else frames
                start = time.perf_counter()
                i = 0
                while time.perf_counter() - start < span:
                    await asyncio.sleep(1.0)
                    i += 1
                    # the tree and the fleet table, in turn
                    await pilot.press("2" if i % 2 else "1")
            elapsed = time.perf_counter() - start
            state["on"] = False
            # what the UI had at the end (one request behind the collector)
            view = collector.view
            applied = sum(c["stored"] + c["removed"] for c in view.workers) if view else 0
            out["offered_blocks_per_s"] = rate
            out["received_blocks_per_s"] = collector.counters.get("blocks", 0) / elapsed
            out["applied_blocks_per_s"] = applied / elapsed
            out["applied_events_per_s"] = (view.index if view else 0) / elapsed
            # offered by now, not yet shown
            out["backlog_blocks"] = max(0, round(rate * elapsed) - applied)
            counters = collector.stop()
            out["gaps"] = counters.get("gaps", 0)

    try:
        asyncio.run(main())
    finally:
        Screen._on_timer_update = original_paint
        proc.join(10)
    try:
        out["sent_blocks_per_s"] = ports.get(timeout=5)
    # the publisher did not finish: the figure is missing, the rest stands
    except Exception:
        pass
    out["tick"] = _pcts(ticks)
    out["frame"] = _pcts(frames)
    out["frames_over_33ms"] = sum(f > 0.033 for f in frames)
    # the same UI, the same tab switches, nothing arriving
    out["frame_idle"] = _pcts(idle_frames)
    out["idle_frames_over_33ms"] = sum(f > 0.033 for f in idle_frames)
    after = baseline(min(int(rate * seconds), 300_000), pool, run)
    # before and after: a shared
    out["baseline_blocks_per_s"] = (out.pop("_baseline_before") + after) / 2
    # machine's load changes during the run
    out["applied_vs_baseline"] = out["applied_blocks_per_s"] / out["baseline_blocks_per_s"]
    return out


def format_result(result: dict) -> str:
    return "\n".join(
        f"{key:>20}: {value if isinstance(value, str) else f'{value:,.2f}'}" for key, value in result.items()
    )
