"""One what-if run: a workload through the real `engine.core` Scheduler and KVCacheManager with no model.

Each worker makes the same calls as `Engine.step` (engine/engine.py), in the same order: `schedule()`, then per
chunk num_computed += n, a token when the sequence is complete (finish: scheduler.finish, manager.free), and
`cache_blocks` for a request still running. So admission, chunking, preemption, locks and eviction are the
engine's own decisions. No torch is imported (tests/kvtui/whatif/test_torch_free.py).

Steps in which every running request only decodes one token into a block it already holds (nobody waits,
no block fills, nobody finishes) are taken as a run at once (`Worker._decode_run`): the engine's calls in them
would allocate, evict, preempt and emit nothing, so the figures are those of stepping one by one
(tests/kvtui/whatif/test_simulate.py compares every figure); a run that writes a trace steps one by one.

Time comes from the stated cost model (cost.py): a step lasts per_step + per prefill token + per decode row,
arrivals join at the first step boundary after they arrive, an idle worker jumps to the next arrival.

Outputs are the recorded tokens, or `output_length` fresh tokens (requests.py: ids that never collide). For
hash-id workloads (Mooncake) generated tokens take pool space while their request runs but are never cached
(managers.py): their content is unknown and the next turn's ids already carry it.

The miss causes (causes.py) are read from the manager's own events as they are emitted.
"""

from __future__ import annotations

import gc
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

from engine.config import EngineConfig
from engine.core.kv_cache import KVCacheManager
from engine.core.request import Request, SamplingParams, Status
from engine.core.scheduler import Scheduler
from engine.models.shape import ModelShape
from engine.trace.writer import TraceSink, TraceWriter
from kvtui.whatif.causes import MissLedger
from kvtui.whatif.cost import CostModel
from kvtui.whatif.managers import PromptOnlyCacheManager
from kvtui.whatif.requests import FRESH_BASE, SimRequest

# one full-attention layer of one head (tests/model_free.py's shape): the manager reads only the block counts
SHAPE = ModelShape(
    "whatif", layers=1, q_heads=1, kv_heads=1, head_dim=1, dtype="float32", elem_bytes=4, windows=(None,)
)


@dataclass(frozen=True)
class SimConfig:
    capacity_tokens: int
    block_size: int = 16
    eviction: str = "lru"
    prefix_cache: bool = True
    max_batched_tokens: int = 8192
    max_num_seqs: int = 256
    cost: CostModel = field(default_factory=CostModel)
    # False: hits in whole blocks only and no partly filled block kept, as vLLM and SGLang serve them
    partial_hits: bool = True

    @property
    def num_blocks(self) -> int:
        return max(1, self.capacity_tokens // self.block_size)


class Worker:
    """One engine's scheduler and manager with a simulated clock; the fleet (fleet.py) steps several."""

    def __init__(
        self,
        config: SimConfig,
        ledger: MissLedger,
        hash_ids: bool,
        trace_path=None,
        name: str = "w0",
        fast_forward: bool = True,
    ):
        self.config, self.ledger, self.name, self.hash_ids = config, ledger, name, hash_ids
        # runs of decode-only steps taken at once (_decode_run; never while writing a trace)
        self.fast_forward = fast_forward
        self.now = 0.0
        self.sink = TraceSink(clock=lambda: self.now)
        self.tracing = trace_path is not None
        engine_config = EngineConfig(
            block_size=config.block_size,
            num_blocks=config.num_blocks,
            eviction=config.eviction,
            prefix_cache=config.prefix_cache,
            partial_hits=config.partial_hits,
            max_batched_tokens=config.max_batched_tokens,
            max_num_seqs=config.max_num_seqs,
        )
        manager_class = PromptOnlyCacheManager if hash_ids else KVCacheManager
        # texts only when a trace is written (bool: the cheapest builtin that takes a token id)
        self.manager = manager_class(SHAPE, engine_config, self.sink, str if self.tracing else bool)
        self.scheduler = Scheduler(self.manager, self.sink, config.max_batched_tokens, config.max_num_seqs)
        self.requests: dict[str, Request] = {}
        self.outputs: dict[str, list[int] | None] = {}
        self.steps = self.preemptions = self.finished = 0
        # prompt tokens served from a partly filled cached block (the one-pass curve never reuses one)
        self.partial_tokens = 0
        self.prompt_tokens = self.hit_tokens = 0
        self.sink.listeners.append(self._on_event)
        if self.tracing:
            self.sink.add_writer(TraceWriter(trace_path))
            self.sink.set_header(
                {
                    "model": SHAPE.to_json(),
                    "block_size": config.block_size,
                    "num_blocks": config.num_blocks,
                    "bytes_per_block": SHAPE.kv_bytes_per_block(config.block_size),
                    "bytes_per_token": SHAPE.kv_bytes_per_token(),
                    "config": asdict(engine_config),
                    "kind": "whatif",
                    "whatif": {
                        "capacity_tokens": config.capacity_tokens,
                        "cost": config.cost.as_dict(),
                        "hash_ids": hash_ids,
                    },
                }
            )
        self._fresh = FRESH_BASE + (hash(name) & 0xFFFF) * (1 << 40)

    # --- events the miss causes need --------------------------------------------------------------------
    def _on_event(self, event: dict) -> None:
        kind = event["type"]
        if kind == "request_preempted":
            self.preemptions += 1
            return
        if kind == "prefix_match":
            detail = event["detail"]
            if "reused_partial" in detail and not detail.get("readmission"):
                self.partial_tokens += detail["reused_partial"]
        self.ledger.on_event(event, self._prompt_of)

    def _prompt_of(self, request_id: str) -> tuple:
        req = self.requests[request_id]
        return req.prompt_token_ids, req.cache_salt, req.block_keys, req.block_contents

    # --- requests ---------------------------------------------------------------------------------------
    def fits(self, item: SimRequest) -> bool:
        return item.num_prompt_tokens + item.num_output_tokens <= self.manager.capacity_tokens

    def add(self, item: SimRequest) -> None:
        """The request arrives now (the engine's submit); one too large for the whole pool is refused."""
        if not self.fits(item):
            self.ledger.too_large(item.request_id, item.num_prompt_tokens)
            return
        prompt = item.prompt_token_ids()
        params = SamplingParams(max_tokens=item.num_output_tokens, ignore_eos=True)
        req = Request(item.request_id, prompt, params, self.now, item.cache_salt)
        self.requests[item.request_id] = req
        self.outputs[item.request_id] = item.output_token_ids
        if self.tracing:
            self.sink.emit(
                "request_arrived",
                request_id=req.request_id,
                prompt_token_ids=prompt,
                prompt_texts=[str(t) for t in prompt],
                max_tokens=params.max_tokens,
                cache_salt=item.cache_salt,
                parent_id=None,
                phase=item.phase,
            )
        self.scheduler.add(req)

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    # --- the step: Engine.step without a model -----------------------------------------------------------
    def step(self) -> None:
        scheduler, manager, sink, tracing = self.scheduler, self.manager, self.sink, self.tracing
        chunks = scheduler.schedule()
        if not chunks:
            if scheduler.preempted_this_step:
                return
            raise RuntimeError(
                f"{self.name}: the scheduler could not place any request (pool of "
                f"{manager.pool.num_blocks} blocks)"
            )
        step = self.steps
        self.steps += 1
        decodes = [c.num_tokens == 1 and bool(c.request.output_token_ids) for c in chunks]
        # hash-id workloads never cache generated tokens: a decode row has nothing to put in the tree
        skip_decode_caching = self.hash_ids
        rows = sum(decodes)
        prefill = sum(c.num_tokens for c in chunks) - rows
        started = self.now
        self.now += self.config.cost.step_seconds(prefill, rows)
        for chunk, is_decode in zip(chunks, decodes):
            req = chunk.request
            req.num_computed += chunk.num_tokens
            if tracing:
                if is_decode:
                    sink.emit("decode", request_id=req.request_id, step=step, position=chunk.start)
                else:
                    sink.emit(
                        "prefill_chunk",
                        request_id=req.request_id,
                        step=step,
                        start=chunk.start,
                        end=chunk.start + chunk.num_tokens,
                    )
            if req.num_computed == req.num_tokens:
                self._emit_token(req)
            if req.status is Status.RUNNING and not (is_decode and skip_decode_caching):
                manager.cache_blocks(req)
        if tracing:
            sink.emit(
                "step",
                step=step,
                num_tokens=sum(c.num_tokens for c in chunks),
                num_prefill=len(chunks) - rows,
                num_decode=rows,
                duration=round(self.now - started, 6),
                free_blocks=manager.num_free(),
            )

    def _emit_token(self, req: Request) -> None:
        output = req.output_token_ids
        recorded = self.outputs[req.request_id]
        if recorded is not None:
            token = recorded[len(output)]
        else:
            token = self._fresh
            self._fresh += 1
        if req.first_token_time is None:
            req.first_token_time = self.now
        req.last_token_time = self.now
        output.append(token)
        if self.tracing:
            self.sink.emit(
                "token_emitted",
                request_id=req.request_id,
                position=req.num_tokens - 1,
                token_id=token,
                text=str(token),
            )
        if len(output) >= req.params.max_tokens:
            self._finish(req)

    def _finish(self, req: Request) -> None:
        req.finish_reason = "length"
        self.scheduler.finish(req)
        self.manager.free(req)
        req.num_computed = 0
        self.finished += 1
        if self.tracing:
            ttft, tpot = req.ttft(), req.tpot()
            self.sink.emit(
                "request_finished",
                request_id=req.request_id,
                reason="length",
                num_prompt_tokens=len(req.prompt_token_ids),
                num_output_tokens=len(req.output_token_ids),
                cached_tokens=req.num_cached,
                ttft=None if ttft is None else round(ttft, 6),
                tpot=None if tpot is None else round(tpot, 6),
            )
        # the finished request's lists are not needed again: keep memory flat on long runs
        del self.requests[req.request_id], self.outputs[req.request_id]

    def advance_to(self, t: float) -> None:
        """Step until the clock reaches t (a step in flight ends after it) or nothing is left to do."""
        fast = self.fast_forward and not self.tracing
        while self.now < t and self.scheduler.has_work():
            if not (fast and self._decode_run(t)):
                self.step()
        if self.now < t:
            self.now = t

    def drain(self) -> None:
        fast = self.fast_forward and not self.tracing
        while self.scheduler.has_work():
            if not (fast and self._decode_run(float("inf"))):
                self.step()

    # --- steps where every running request decodes into a block it already holds ----------------------------
    def _decode_run(self, t: float) -> int:
        """Take k steps at once where each would only decode one token per running request: nobody waits,
        each request's next k positions lie inside the blocks it holds and need no copy, no block fills (so
        nothing enters the tree), nobody finishes, and the clock stays before t. The engine's calls would
        change nothing else in those steps (no allocation, eviction, preemption or event); the tokens, the
        clock and the step count come out as step() makes them. Returns k (0: take one ordinary step)."""
        scheduler, manager = self.scheduler, self.manager
        running = scheduler.running
        if scheduler.waiting or not running or len(running) > scheduler.max_batched_tokens:
            return 0
        bs = self.config.block_size
        k = 1 << 62
        for req in running:
            output, computed = req.output_token_ids, req.num_computed
            if not output or computed != len(req.prompt_token_ids) + len(output) - 1:
                return 0
            table = req.block_table
            offset = computed % bs
            if offset and manager.needs_copy(table[computed // bs]):
                return 0
            # a block filled earlier and not yet in the tree would be inserted by the next step's cache_blocks
            if not self.hash_ids and min(computed // bs, len(table)) > req.blocks_in_tree:
                return 0
            room = min(len(table) * bs - computed, bs - 1 - offset, req.params.max_tokens - len(output) - 1)
            if room < 1:
                return 0
            if room < k:
                k = room
        duration = self.config.cost.step_seconds(0, len(running))
        now, done = self.now, 0
        while done < k and now < t:
            now += duration
            done += 1
        order = sorted(running, key=lambda r: r.admitted_order)
        outputs = self.outputs
        for _ in range(done):
            for req in order:
                recorded = outputs[req.request_id]
                output = req.output_token_ids
                if recorded is not None:
                    output.append(recorded[len(output)])
                else:
                    output.append(self._fresh)
                    self._fresh += 1
        for req in order:
            req.num_computed += done
            req.last_token_time = now
        self.steps += done
        self.now = now
        return done

    def close(self) -> None:
        self.sink.close()

    def cached_keys(self) -> set:
        """Keys of every block in this worker's prefix tree now."""
        radix = getattr(self.manager.prefix_cache, "radix", None)
        if radix is None:
            return set()
        return {key for node in radix.nodes.values() for key in node.keys}


@dataclass
class SimResult:
    config: SimConfig
    requests: int
    prompt_tokens: int
    hit_tokens: int
    causes: Counter
    ledger: MissLedger
    steps: int
    preemptions: int
    simulated_seconds: float
    wall_seconds: float
    partial_tokens: int = 0

    @property
    def token_hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


class Progress:
    """A line on stderr every `every` seconds of wall time (long runs only)."""

    def __init__(self, label: str, total: int, enabled: bool = True, every: float = 2.0):
        self.label, self.total, self.enabled, self.every = label, total, enabled, every
        self.started = self._last = time.perf_counter()

    def __call__(self, arrived: int, sim_t: float) -> None:
        now = time.perf_counter()
        if self.enabled and now - self._last >= self.every:
            self._last = now
            print(
                f"  {self.label}: {arrived:,}/{self.total:,} requests arrived, {sim_t:,.0f} s simulated, "
                f"{now - self.started:.0f} s",
                file=sys.stderr,
                flush=True,
            )


def simulate(
    requests: list[SimRequest],
    config: SimConfig,
    hash_ids: bool = False,
    trace_path=None,
    progress: Callable[[int, float], None] | None = None,
    fast_forward: bool = True,
) -> SimResult:
    """Run the requests (arrival order) through one worker; the hit rate and the cause of every miss.
    `fast_forward=False` takes every step through the scheduler (the same figures, slower)."""
    started = time.perf_counter()
    ledger = MissLedger(config.block_size)
    worker = Worker(config, ledger, hash_ids, trace_path, fast_forward=fast_forward)
    with paused_gc():
        _run_worker(worker, requests, progress)
    prompt, hits, causes = ledger.totals()
    return SimResult(
        config,
        len(requests),
        prompt,
        hits,
        causes,
        ledger,
        worker.steps,
        worker.preemptions,
        worker.now,
        time.perf_counter() - started,
        worker.partial_tokens,
    )


@contextmanager
def paused_gc():
    """The cyclic garbage collector off for a run: it rescans every block list and tree node held so far on
    each collection, a quarter of a production-size run (12k Mooncake-shaped requests at 3M: 60 s with it,
    44 s without, the same peak memory: a run makes few cycles, collected when it is back on)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _run_worker(worker: Worker, requests: list[SimRequest], progress) -> None:
    try:
        for index, item in enumerate(requests):
            worker.advance_to(item.arrival)
            worker.add(item)
            if progress is not None and not index % 64:
                progress(index, worker.now)
        worker.drain()
    finally:
        worker.close()
