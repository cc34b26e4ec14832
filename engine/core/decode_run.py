"""Runs of decode-only steps taken at once, for a core with no model (kvtui's what-if worker).

In a step where every running request only decodes one token into a block it already holds (nobody waits, the
block needs no copy, no block fills so nothing enters the tree, nobody finishes), the core's calls allocate,
evict, preempt and emit nothing: only the tokens, the computed counts and the clock move. `decode_run_length`
says how many such steps lie ahead; `take_decode_run` takes them, with the tokens, counts and step count that
stepping one by one gives (tests/kvtui/whatif/test_simulate.py compares every figure). Never used while step
events are written: those steps would emit decode and token events.
"""

from __future__ import annotations

from engine.core.engine_core import EngineCore, TokenFor


def decode_run_length(core: EngineCore) -> int:
    """How many decode-only steps with nothing else to do lie ahead (0: take an ordinary step)."""
    scheduler, manager = core.scheduler, core.cache
    running = scheduler.running
    if scheduler.waiting or not running or len(running) > scheduler.max_batched_tokens:
        return 0
    bs = manager.block_size
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
        if manager.cache_generated and min(computed // bs, len(table)) > req.blocks_in_tree:
            return 0
        room = min(
            len(table) * bs - computed, bs - 1 - offset, req.params.max_tokens - req.num_new_tokens - 1
        )
        if room < 1:
            return 0
        k = min(k, room)
    return k


def take_decode_run(core: EngineCore, steps: int, token_for: TokenFor, now: float) -> None:
    """Take `steps` decode-only steps (at most `decode_run_length`); the last one ends at `now`."""
    order = sorted(core.scheduler.running, key=lambda r: r.admitted_order)
    for _ in range(steps):
        for index, req in enumerate(order):
            req.output_token_ids.append(token_for(index, req))
    for req in order:
        req.num_computed += steps
        req.last_token_time = now
    core.num_steps += steps
