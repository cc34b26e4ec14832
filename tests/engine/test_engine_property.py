"""Stateful property test of the whole engine on a tiny model: submit (parallel samples too), a follow-up turn
(also once the pool evicted part of the conversation), step, fork, edit (running, waiting and finished
requests), abort, evict in any order, under memory pressure.

After every rule: ref counts equal the number of block tables holding each block, free + used + cached =
total, the prefix tree never holds a free block, no locked or referenced block is ever evicted, and the
differential oracle (tests/helpers/oracle.py) finds the UI's state, built from the events alone, equal to the engine's
own. When an example ends, every request is run to completion and each greedy continuation equals
transformers' own generate on the sequence it continued from. The models: full attention, a sliding window
(rings, snapshots, window back-off), attention sinks, and window layers paged as vLLM pages them (an all-window
model and a hybrid one: KV-cache groups, window blocks released, the hybrid hit rule); a host tier of a few blocks (or none), so blocks are
offloaded, loaded back and dropped from host often. KVTUI_ENGINE_EXAMPLES sets the number of examples.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from engine.core.edits import EditError
from engine.core.request import Status
from engine.engine import Engine, EngineConfig, SamplingParams
from tests.helpers.oracle import Witness, differences
from tests.helpers.reference import greedy_generate
from tests.helpers.tiny_models import tiny_model

EXAMPLES = int(os.environ.get("KVTUI_ENGINE_EXAMPLES", "60"))
SMALL = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=32, num_attention_heads=4)
MODELS = {
    "full": tiny_model("llama-gqa", num_key_value_heads=2, **SMALL),
    # rings + snapshots
    "window": tiny_model("mistral-mqa", sliding_window=3, num_key_value_heads=1, **SMALL),
    # layer 0 full, layer 1 a window of 3
    "hybrid": tiny_model(
        "qwen2-gqa", use_sliding_window=True, sliding_window=3, max_window_layers=1, **SMALL
    ),
}
# window_layout="paged" (vLLM's hybrid layout): model name -> the model it pages
PAGED = {"paged-window": "window", "paged-hybrid": "hybrid"}
# attention sinks on the full model: every layer a ring, answers change
SINKS = dict(window=4, sink_tokens=1)

prompts = st.lists(st.sampled_from([3, 4, 5]), min_size=1, max_size=3).map(
    lambda tail: [10, 11, 12, 13, 14] + tail
)
pick = st.integers(0, 1000)
# the lower-tier events of every example run (printed at the end with -s; per example in hypothesis statistics)
TIER_EVENTS = ("block_offloaded", "block_loaded", "host_evicted")
TIER_COUNTS: Counter = Counter()


@pytest.fixture(autouse=True, scope="module")
def _report_tier_counts():
    yield
    print(f"\nlower-tier events over all examples: {dict(TIER_COUNTS)}")


class EngineMachine(RuleBasedStateMachine):
    @initialize(
        policy=st.sampled_from(["lru", "lfu", "cost"]),
        block_size=st.integers(1, 3),
        budget=st.integers(2, 8),
        model=st.sampled_from([*sorted(MODELS), "sinks", *sorted(PAGED)]),
        host_blocks=st.sampled_from([0, 1, 3, 6, 12]),
    )
    def setup(self, policy, block_size, budget, model, host_blocks):
        paged = model in PAGED
        config = EngineConfig(
            block_size=block_size,
            num_blocks=(56 if paged else 28) // block_size,
            max_batched_tokens=budget,
            eviction=policy,
            host_blocks=0 if paged else host_blocks,
            **(SINKS if model == "sinks" else {}),
            **(dict(window_layout="paged") if paged else {}),
        )
        self.model = MODELS["full" if model == "sinks" else PAGED.get(model, model)]
        self.sinks = model == "sinks"
        self.engine = Engine.from_model(self.model, config=config)
        self.engine.trace.listeners.append(self._check_event)
        self.witness = Witness(self.engine)
        self.tier_events: Counter = Counter()

    def _check_event(self, event):
        if event["type"] in TIER_EVENTS:
            self.tier_events[event["type"]] += 1
        if event["type"] == "block_evicted":
            assert self.engine.cache.pool.ref_counts[event["physical"]] == 0
            # a partial tail hangs off a node; it is not part of it (nor is another KV-cache group's block)
            if not event["hash"].startswith("tail:") and event["node_id"] >= 0:
                assert self.engine.cache.prefix_cache.radix.nodes[event["node_id"]].lock_ref == 0

    def _pick(self, index, status=None):
        requests = [r for r in self.engine.requests.values() if status is None or r.status in status]
        return requests[index % len(requests)] if requests else None

    @rule(
        prompt=prompts,
        max_tokens=st.integers(1, 4),
        salt=st.sampled_from([None, None, "b"]),
        n=st.sampled_from([1, 1, 1, 2]),
    )
    def submit(self, prompt, max_tokens, salt, n):
        if len(self.engine.requests) < 8:
            self.engine.submit(prompt, SamplingParams(max_tokens=max_tokens, n=n), cache_salt=salt)

    @rule(index=pick, tail=st.lists(st.sampled_from([3, 4, 5]), min_size=1, max_size=2))
    def follow_up(self, index, tail):
        """The next turn of a conversation: an earlier request's sequence and more (its blocks may be on host
        by now, so the match loads them back)."""
        # a finished conversation is the one whose blocks were left to the cache (and so to host)
        req = self._pick(index, {Status.FINISHED}) or self._pick(index)
        if req is not None and len(self.engine.requests) < 8:
            self.engine.submit(req.tokens + tail, SamplingParams(max_tokens=2), cache_salt=req.cache_salt)

    @rule(
        prompt=prompts, n=st.integers(1, 8), tail=st.lists(st.sampled_from([3, 4, 5]), min_size=1, max_size=2)
    )
    def turn_resumes_after_eviction(self, prompt, n, tail):
        """A turn runs to its end, the pool evicts some cached blocks (to host, when there is one), and the next
        turn of the conversation comes (its match loads back what host still holds)."""
        if len(self.engine.requests) >= 7:
            return
        rid = self.engine.submit(prompt, SamplingParams(max_tokens=2))
        for _ in range(40):
            if self.engine.requests[rid].status == Status.FINISHED:
                break
            self.engine.step()
        self.engine.cache.evict(n)
        self.engine.submit(self.engine.requests[rid].tokens + tail, SamplingParams(max_tokens=2))

    @rule()
    def step(self):
        self.engine.step()

    @rule(index=pick)
    def fork(self, index):
        req = self._pick(index, {Status.RUNNING})
        if req is not None and len(self.engine.requests) < 8:
            self.engine.fork(req.request_id, 1)

    @rule(
        index=pick,
        position=pick,
        kind=st.sampled_from(["replace", "insert", "delete"]),
        token=st.sampled_from([3, 4, 6]),
    )
    def edit(self, index, position, kind, token):
        req = self._pick(index)
        if req is None:
            return
        try:
            self.engine.edit(req.request_id, position % (req.num_tokens + 1), [token], kind)
        except EditError:
            # out of range for this kind: a message, and nothing changed
            pass

    @rule(n=st.integers(1, 8))
    def evict(self, n):
        self.engine.cache.evict(n)

    @rule(index=pick)
    def abort(self, index):
        req = self._pick(index, {Status.RUNNING, Status.WAITING})
        if req is not None:
            self.engine.abort(req.request_id)

    @invariant()
    def the_view_is_the_engine(self):
        assert differences(self.engine, self.witness.state()) == []

    @invariant()
    def pool_agrees_with_tables_and_tree(self):
        cache = self.engine.cache
        pool = cache.pool
        owners = Counter(b for r in self.engine.requests.values() for b in r.block_table)
        # window_layout="paged": the other KV-cache groups' tables
        owners.update(
            b for tables in cache.groups.tables.values() for t in tables.values() for b in t if b is not None
        )
        assert [owners.get(b, 0) for b in range(pool.num_blocks)] == pool.ref_counts
        free = set(pool.free)
        assert len(free) == len(pool.free)
        used = {b for b in range(pool.num_blocks) if pool.ref_counts[b]}
        cached = {
            b
            for b in range(pool.num_blocks)
            if not pool.ref_counts[b] and (cache.prefix_cache.holds(b) or b in cache.groups.evictable)
        }
        assert not (free & used) and not (free & cached)
        # nothing leaked
        assert len(free) + len(used) + len(cached) == pool.num_blocks

    def teardown(self):
        engine = self.engine
        for _ in range(400):
            if not engine.has_unfinished():
                break
            engine.step()
        assert not engine.has_unfinished()
        assert differences(engine, self.witness.state()) == []
        TIER_COUNTS.update(self.tier_events)
        for kind in self.tier_events:
            event(kind)
        if self.sinks:
            # attention sinks change the answer on purpose (the sink_divergence event says by how much)
            return
        for req in engine.requests.values():
            context = req.prompt_token_ids + req.output_token_ids[: req.generation_start]
            new = req.output_token_ids[req.generation_start :]
            if not new:
                # aborted before its first token
                continue
            assert new == greedy_generate(self.model, context, len(new)), req.request_id


EngineMachine.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=25, deadline=None, suppress_health_check=list(HealthCheck)
)
test_engine_property = pytest.mark.filterwarnings("ignore")(EngineMachine.TestCase)
