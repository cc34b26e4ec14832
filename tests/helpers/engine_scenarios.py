"""Random engine scenarios as plain data, and two drivers that play one: through `Engine` (a tiny model, greedy)
and through a bare `EngineCore` with the engine's tokens fed back. Each driver returns the event stream with the
wall-clock fields taken out, so the two can be compared event for event.

A scenario is a config and a list of actions between steps: submit (a prompt of token ids, max_tokens, n, a
salt), step, fork, edit (replace, insert, delete), abort. An action the engine refuses (an edit out of range, a
fork of a request that ended with a stop token) is recorded as the error's type in the stream, so both drivers
must refuse it alike.
"""

from __future__ import annotations

import random
from collections import defaultdict, deque
from dataclasses import dataclass, field

import torch
import transformers

# fields measured on the wall clock (or from it)
WALL_CLOCK = ("t", "duration", "ttft", "tpot")
# events of the model runner, not of the cache bookkeeping
RUNNER_EVENTS = ("roofline", "sink_divergence")

SMALL = dict(vocab_size=97, hidden_size=32, intermediate_size=32, max_position_embeddings=256)
MODEL_CONFIGS = {
    "full": ("LlamaConfig", dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)),
    "window": (
        "MistralConfig",
        dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, sliding_window=3),
    ),
    "alternating": (
        "Gemma3TextConfig",
        dict(
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
        ),
    ),
}
_MODELS: dict[str, object] = {}


def tiny(kind: str):
    if kind not in _MODELS:
        class_name, extra = MODEL_CONFIGS[kind]
        config = getattr(transformers, class_name)(**SMALL, **extra)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
        _MODELS[kind] = model
    return _MODELS[kind]


@dataclass
class Scenario:
    seed: int
    model: str
    config: dict
    actions: list[tuple] = field(default_factory=list)


def random_scenario(seed: int) -> Scenario:
    rng = random.Random(seed)
    block_size = rng.randint(1, 4)
    config = dict(
        block_size=block_size,
        # pressure: a pool of 20-40 tokens
        num_blocks=rng.randint(20, 40) // block_size,
        max_batched_tokens=rng.randint(2, 12),
        max_num_seqs=rng.randint(2, 6),
        eviction=rng.choice(["lru", "lfu", "cost"]),
        partial_hits=rng.random() < 0.7,
        prefix_cache=rng.random() < 0.9,
    )
    if config["prefix_cache"]:
        # a host tier below the pool in half the scenarios (its own draw: the other draws stay as they were)
        config["host_blocks"] = random.Random(f"host-{seed}").choice([0, 0, 3, 12])
    scenario = Scenario(seed, rng.choice(sorted(MODEL_CONFIGS)), config)
    shared = [rng.randint(3, 96) for _ in range(rng.randint(2, 8))]
    submitted = 0
    for _ in range(rng.randint(8, 30)):
        roll = rng.random()
        if roll < 0.3 or not submitted:
            prompt = shared[: rng.randint(0, len(shared))] + [
                rng.randint(3, 96) for _ in range(rng.randint(1, 6))
            ]
            n = rng.choice([1, 1, 1, 2, 3])
            salt = rng.choice([None, None, None, "tenant-a"])
            scenario.actions.append(("submit", prompt, rng.randint(1, 6), n, salt))
            submitted += 1
        elif roll < 0.75:
            scenario.actions.append(("step",))
        elif roll < 0.83:
            scenario.actions.append(("fork", rng.randrange(submitted), rng.randint(1, 2)))
        elif roll < 0.95:
            kind = rng.choice(["replace", "insert", "delete"])
            tokens = [rng.randint(3, 96) for _ in range(rng.randint(1, 3))]
            scenario.actions.append(("edit", rng.randrange(submitted), rng.randint(0, 14), tokens, kind))
        else:
            scenario.actions.append(("abort", rng.randrange(submitted)))
    return scenario


def _clean(events: list[dict]) -> list[dict]:
    out = []
    for event in events:
        if event["type"] in RUNNER_EVENTS:
            continue
        event = {k: v for k, v in event.items() if k not in WALL_CLOCK and k != "seq"}
        if isinstance(event.get("detail"), dict):
            # when a block the match missed was evicted
            event["detail"] = {k: v for k, v in event["detail"].items() if k != "evicted_at"}
        out.append(event)
    return out


def _play(scenario: Scenario, submit, step, fork, edit, abort, has_work) -> list:
    """The actions through one driver; refusals recorded by type. Returns the submitted request ids."""
    ids: list[str] = []
    errors: list = []
    for action in scenario.actions:
        name = action[0]
        try:
            if name == "submit":
                ids.append(submit(*action[1:]))
            elif name == "step":
                step()
            elif name == "fork":
                fork(ids[action[1]], action[2])
            elif name == "edit":
                edit(ids[action[1]], action[2], action[3], action[4])
            elif name == "abort":
                abort(ids[action[1]])
        except (ValueError, RuntimeError) as exc:
            errors.append((name, type(exc).__name__))
    while has_work():
        step()
    return errors


def run_engine(scenario: Scenario, trace_path=None):
    """The scenario through `Engine`: (events, tokens per request in the order they were emitted, refusals)."""
    from engine.engine import Engine, EngineConfig, SamplingParams

    engine = Engine(tiny(scenario.model), None, EngineConfig(**scenario.config))
    if trace_path is not None:
        engine.add_trace_file(trace_path)
    events: list[dict] = []
    engine.trace.listeners.append(events.append)
    errors = _play(
        scenario,
        lambda prompt, max_tokens, n, salt: engine.submit(
            prompt, SamplingParams(max_tokens=max_tokens, n=n, ignore_eos=True), salt
        ),
        engine.step,
        engine.fork,
        lambda rid, pos, tokens, kind: engine.edit(rid, pos, tokens, kind),
        engine.abort,
        engine.has_unfinished,
    )
    engine.close()
    tokens = defaultdict(list)
    for event in events:
        if event["type"] == "token_emitted":
            tokens[event["request_id"]].append(event["token_id"])
    return _clean(events), dict(tokens), errors, engine


def run_core(scenario: Scenario, tokens: dict[str, list[int]], engine):
    """The scenario through a bare `EngineCore`, the engine's tokens fed back in the order it emitted them."""
    from engine.config import EngineConfig
    from engine.core.engine_core import EngineCore
    from engine.core.request import SamplingParams
    from engine.trace.writer import TraceSink

    sink = TraceSink()
    events: list[dict] = []
    sink.listeners.append(events.append)
    core = EngineCore(
        engine.shape,
        EngineConfig(**scenario.config),
        sink,
        engine.token_text,
        max_positions=engine.core.max_positions,
    )
    queues = {rid: deque(ts) for rid, ts in tokens.items()}

    def step():
        scheduled = core.schedule()
        if scheduled is not None:
            core.update_from_output(scheduled, lambda index, req: queues[req.request_id].popleft())
        # the scheduler walks `running` as it stands, oldest first: admissions, forks, preemptions, edits and
        # aborts keep it in admission order
        order = [r.admitted_order for r in core.scheduler.running]
        assert order == sorted(set(order)), f"running out of admission order: {order}"

    errors = _play(
        scenario,
        lambda prompt, max_tokens, n, salt: core.add_request(
            prompt, SamplingParams(max_tokens=max_tokens, n=n, ignore_eos=True), salt
        ),
        step,
        core.fork,
        lambda rid, pos, toks, kind: core.edit(rid, pos, toks, kind),
        core.abort,
        core.has_unfinished,
    )
    return _clean(events), errors
