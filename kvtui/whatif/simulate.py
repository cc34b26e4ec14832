"""One what-if run: a workload through the engine's own core (engine/core/engine_core.py) with a cost clock and
no model.

A worker is an `EngineCore` (the engine's scheduler, KV-cache manager and step bookkeeping: admission, chunking,
preemption, locks, eviction, stops and finishes are the engine's own decisions), a clock, and the tokens: the
recorded ones, or `output_length` fresh ones (requests.py: ids that never collide). For hash-id workloads
(Mooncake) the core caches prompt blocks only (`cache_generated=False`): generated tokens take pool space while
their request runs, but their content is unknown and the next turn's ids already carry it.

Time comes from the stated cost model (cost.py): a step lasts per_step + per prefill token + per decode row,
arrivals join at the first step boundary after they arrive, an idle worker jumps to the next arrival. Runs of
decode-only steps are taken at once, and quiet decode rows are set aside in the others (engine/core/quiet_rows.py),
unless a trace is written. No torch is imported (tests/kvtui/whatif/test_simulate.py).

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
from engine.core.engine_core import EngineCore
from engine.core.quiet_rows import Scan, scan
from engine.core.request import Request, SamplingParams
from engine.models.shape import ModelShape
from engine.trace.writer import TraceSink, TraceWriter
from kvtui.whatif.beyond import GeneratedHits
from kvtui.whatif.causes import MissLedger
from kvtui.whatif.cost import CostModel
from kvtui.whatif.hash_keys import prefill_keys
from kvtui.whatif.requests import FRESH_BASE, OutputTokens, SimRequest
from kvtui.whatif.run_sink import RunSink

# one full-attention layer of one head (tests/helpers/model_free.py's shape): the manager reads only the block counts
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
    # tiers below the device (engine/core/tiers.py): evicted cached blocks go to host, then disk (0: none)
    host_capacity_tokens: int = 0
    disk_capacity_tokens: int = 0
    # a hybrid model's KV-cache groups (engine/models/kv_groups.py's KVGroup), sharing the pool: the run is
    # hybrid_timeline.py's twin; () for one full-attention group
    kv_groups: tuple = ()
    prefix_match_unit: int | None = None

    @property
    def num_blocks(self) -> int:
        return max(1, self.capacity_tokens // self.block_size)

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            block_size=self.block_size,
            num_blocks=self.num_blocks,
            eviction=self.eviction,
            prefix_cache=self.prefix_cache,
            partial_hits=self.partial_hits,
            max_batched_tokens=self.max_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            host_blocks=self.host_capacity_tokens // self.block_size,
            disk_blocks=self.disk_capacity_tokens // self.block_size,
        )


class Worker:
    """One engine core with a simulated clock; the fleet (fleet.py) steps several."""

    def __init__(
        self,
        config: SimConfig,
        ledger: MissLedger,
        hash_ids: bool,
        trace_path=None,
        name: str = "w0",
        fast_forward: bool = True,
        shape: ModelShape = SHAPE,
        tokens_per_hash_id: int | None = None,
    ):
        self.config, self.ledger, self.name, self.hash_ids = config, ledger, name, hash_ids
        # runs of decode-only steps taken at once (never while writing a trace)
        self.fast_forward = fast_forward
        self.now = 0.0
        self.tracing = trace_path is not None
        self.sink = (TraceSink if self.tracing else RunSink)(clock=lambda: self.now)
        engine_config = config.engine_config()
        self.core = EngineCore(
            shape,
            engine_config,
            self.sink,
            # texts only when a trace is written
            str if self.tracing else None,
            cache_generated=not hash_ids,
            # vLLM's granularity, and its moment of caching: a block is found from its allocation on
            cache_on_allocation=not config.partial_hits,
            step_events=self.tracing,
            keep_finished=False,
        )
        self.manager, self.scheduler = self.core.cache, self.core.scheduler
        # the recorded tokens, or fresh ids unique to this worker
        self.tokens = OutputTokens(FRESH_BASE + (hash(name) & 0xFFFF) * (1 << 40))
        self.preemptions = self.finished = 0
        # prompt tokens served from a partly filled cached block (the one-pass curve never reuses one)
        self.partial_tokens = 0
        # and from whole blocks of generated tokens (beyond.py; a hash-id workload never caches those)
        self.generated = None if hash_ids else GeneratedHits(config.block_size)
        # request -> its partly filled block, known unshared (quiet_rows.scan)
        self._own: dict = {}
        self.sink.listeners.append(self._on_event)
        self.core.finish_listeners.append(self._on_finish)
        if self.tracing:
            self.sink.add_writer(TraceWriter(trace_path))
            self.sink.set_header(
                {
                    "model": shape.to_json(),
                    "block_size": config.block_size,
                    "num_blocks": config.num_blocks,
                    "bytes_per_block": shape.kv_bytes_per_block(config.block_size),
                    "bytes_per_token": shape.kv_bytes_per_token(),
                    "config": asdict(engine_config),
                    "kind": "whatif",
                    "whatif": {
                        "capacity_tokens": config.capacity_tokens,
                        "cost": config.cost.as_dict(),
                        "hash_ids": hash_ids,
                        # B: a hash id's run of made-up token ids (the replay labels them #0 #1 #2)
                        "tokens_per_hash_id": tokens_per_hash_id,
                    },
                }
            )

    @property
    def requests(self) -> dict[str, Request]:
        return self.core.requests

    @property
    def steps(self) -> int:
        return self.core.num_steps

    # --- events the miss causes need --------------------------------------------------------------------
    def _on_event(self, event: dict) -> None:
        kind = event["type"]
        if kind == "request_preempted":
            self.preemptions += 1
            self._own.pop(event["request_id"], None)
            return
        if kind == "prefix_match":
            detail = event["detail"]
            if not detail.get("readmission"):
                partial = detail.get("reused_partial", 0)
                self.partial_tokens += partial
                if self.generated is not None:
                    req = self.core.requests[event["request_id"]]
                    self.generated.on_first_lookup(req, event["matched_tokens"], partial)
        self.ledger.on_event(event, self._prompt_of)

    def _prompt_of(self, request_id: str) -> tuple:
        req = self.core.requests[request_id]
        return req.prompt_token_ids, req.cache_salt, req.block_keys, req.block_contents

    def _on_finish(self, req: Request) -> None:
        self.finished += 1
        # the finished request's tokens are not needed again: keep memory flat on long runs
        self.tokens.forget(req.request_id)
        self._own.pop(req.request_id, None)

    # --- requests ---------------------------------------------------------------------------------------
    def fits(self, item: SimRequest) -> bool:
        return item.num_prompt_tokens + item.num_output_tokens <= self.manager.capacity_tokens

    def add(self, item: SimRequest) -> None:
        """The request arrives now (the engine's submit); one too large for the whole pool is refused."""
        if not self.fits(item):
            self.ledger.too_large(item.request_id, item.num_prompt_tokens)
            return
        params = SamplingParams(max_tokens=item.num_output_tokens, ignore_eos=True)
        self.tokens.add(item.request_id, item.output_token_ids)
        compact = None if self.tracing else self.config.block_size
        rid = self.core.add_request(
            item.prompt_token_ids(compact), params, item.cache_salt, item.request_id, item.phase
        )
        if self.hash_ids and item.hash_ids is not None:
            prefill_keys(self.core.requests[rid], item, self.config.block_size)

    def has_work(self) -> bool:
        return self.core.has_unfinished()

    # --- the step: the engine core's, with the cost clock instead of a forward ---------------------------
    def step(self, quiet: Scan | None = None) -> None:
        """One step; the quiet rows `quiet` found are set aside when that changes no decision."""
        scheduled = self.core.schedule(set_aside=quiet)
        if scheduled is None:
            # this step only preempted
            return
        self.now += self.config.cost.step_seconds(
            scheduled.num_prefill_tokens, scheduled.num_decode + len(scheduled.set_aside)
        )
        # no K/V memory here: of the pool's copies (copy-on-write, tier moves) only the loads from a lower tier
        # count, each at its load's cost instead of its tokens' prefill
        for copy in self.manager.pool.take_copies():
            if copy.dst_tier == "device" and copy.src_tier != "device":
                self.now += self.config.cost.load_seconds(copy.src_tier, copy.num_tokens)
        self.core.update_from_output(scheduled, self.tokens.token_for, self.tokens.take)
        # and the window rings' copies are dropped
        self.manager.rings.take_pending()

    def advance_to(self, t: float) -> None:
        """Step until the clock reaches t (a step in flight ends after it) or nothing is left to do."""
        while self.now < t and self.core.has_unfinished():
            self._next(t)
        if self.now < t:
            self.now = t

    def drain(self) -> None:
        while self.core.has_unfinished():
            self._next(float("inf"))

    def _next(self, t: float) -> None:
        """The decode-only steps ahead at once while the clock stays before t, else one step."""
        if not self.fast_forward or self.tracing:
            self.step()
            return
        ahead = scan(self.core, self._own)
        if not ahead.run:
            self.step(ahead if ahead.quiet else None)
            return
        duration = self.config.cost.step_seconds(0, len(self.scheduler.running))
        now, done = self.now, 0
        while done < ahead.run and now < t:
            now += duration
            done += 1
        self.now = now
        self.core.decode_run(ahead, done, self.tokens.take)

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
    # served from whole blocks of generated tokens (beyond.py)
    generated_tokens: int = 0
    # with tiers: hit tokens by the tier that served them at admission (engine/trace/metrics.py)
    tier_hits: dict | None = None

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
    tokens_per_id = requests[0].trace_block_size if hash_ids and requests else None
    worker = Worker(
        config, ledger, hash_ids, trace_path, fast_forward=fast_forward, tokens_per_hash_id=tokens_per_id
    )
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
        worker.generated.tokens if worker.generated is not None else 0,
        dict(worker.manager.hit_rates.tier_hits) or None,
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
