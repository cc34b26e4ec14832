"""Steps whose plain decode rows are taken in bulk, for an engine core with no model and no trace (kvtui's
what-if worker): the engine's
scheduler and bookkeeping run for the other rows only.

A running request is *quiet* in the next step when that step only appends one token into a block it already
holds: it decodes, the slot is allocated, the block needs no copy, nothing enters the prefix tree (no block
fills while generated tokens are cached, none is pending), and it does not finish. The engine's calls for such
a row allocate, evict, preempt and emit nothing; they only spend one token of the step's budget and one of its
sequences. A production-shaped run has dozens of them in every step that admits or finishes someone, and
their bookkeeping is most of a run's time.

When every running request is quiet and nobody waits, the steps ahead are a decode run: as many as every row
stays quiet for are taken at once (`take_run`: only tokens, counts and the clock move). Otherwise a step sets
the quiet rows aside (`schedule_beside`), which is exact when it changes nothing the engine decides, checked before the step (else the
ordinary step runs):
- the budget: walking the running requests oldest first as the scheduler does, every quiet row still gets its
  token (no older row takes the rest of the budget), so the others get what they would have got with the
  budget less one token per quiet row, and admission sees the same budget left;
- the pool: the other running rows need at most the blocks that are free or evictable now, so no one is
  preempted (a preemption's victim is the newest running request, which may be a quiet one);
- sequences: admission sees the same count with the limit less the quiet rows.
The quiet rows take their tokens after the others' (their order among fresh ids differs; fresh ids are unique
either way, and recorded tokens are per request). tests/kvtui/whatif/test_quiet_rows.py compares every figure
with the ordinary steps.
"""

from __future__ import annotations

from engine.core.engine_core import EngineCore, ScheduledStep
from engine.core.request import Request


class Scan:
    """The quiet rows of the next step, in running order, and how many decode-only steps lie ahead (0 unless
    every running request is quiet and nobody waits)."""

    __slots__ = ("quiet", "run")

    def __init__(self, quiet: list[Request], run: int):
        self.quiet, self.run = quiet, run


def scan(core: EngineCore, own: dict) -> Scan:
    """One pass over the running requests. `own`: request id -> the block it was last seen writing into
    unshared (a running request's partly filled block stays its own until it fills: no copy check again;
    the caller forgets a request that finishes or is preempted)."""
    scheduler, manager = core.scheduler, core.cache
    bs = manager.block_size
    cache_generated = manager.cache_generated
    needs_copy = manager.needs_copy
    quiet = []
    run = 1 << 62
    everyone = not scheduler.waiting and len(scheduler.running) <= scheduler.max_batched_tokens
    for req in scheduler.running:
        output = req.output_token_ids
        computed = req.num_computed
        table = req.block_table
        room = len(table) * bs - computed
        if not output or room < 1 or computed != len(req.prompt_token_ids) + len(output) - 1:
            everyone = False
            continue
        offset = computed % bs
        if offset:
            physical = table[computed // bs]
            if own.get(req.request_id) != physical:
                if needs_copy(physical):
                    everyone = False
                    continue
                own[req.request_id] = physical
        left = req.params.max_tokens - (len(output) - req.generation_start) - 1
        if left < room:
            room = left
        if cache_generated:
            if min(computed // bs, len(table)) > req.blocks_in_tree:
                everyone = False
                continue
            if bs - 1 - offset < room:
                room = bs - 1 - offset
        if room < 1:
            everyone = False
            continue
        quiet.append(req)
        if room < run:
            run = room
    return Scan(quiet, run if everyone and quiet else 0)


def schedule_beside(core: EngineCore, quiet: list[Request]) -> ScheduledStep | None:
    """The step's chunks for every running request but `quiet`, or None when setting them aside could change
    a decision (then take an ordinary step). The quiet rows are not in the step: `take_quiet` gives them their
    tokens after `update_from_output`. The step may hold no chunk at all (only quiet rows decode)."""
    scheduler, manager = core.scheduler, core.cache
    if manager.rings.enabled:
        return None
    ids = {id(r) for r in quiet}
    budget = scheduler.max_batched_tokens
    need = 0
    blocks_for = manager.pool.blocks_for
    quiet_left = len(quiet)
    for req in sorted(scheduler.running, key=lambda r: r.admitted_order):
        if id(req) in ids:
            if budget < 1:
                return None
            budget -= 1
            quiet_left -= 1
            continue
        if quiet_left and req.num_to_compute > budget - quiet_left:
            # it would take budget that a younger quiet row needs for its token
            return None
        n = min(req.num_to_compute, budget)
        copy = int(manager._needs_copy_first(req))
        need += max(0, blocks_for(req.num_computed + n) - len(req.block_table) + copy)
        budget -= n
    if need and not manager.can_allocate(need):
        return None
    running = scheduler.running
    others = [r for r in running if id(r) not in ids]
    before = len(others)
    scheduler.running = others
    scheduler.max_batched_tokens -= len(quiet)
    scheduler.max_num_seqs -= len(quiet)
    started = core.trace.now()
    try:
        chunks = scheduler.schedule()
    finally:
        scheduler.max_batched_tokens += len(quiet)
        scheduler.max_num_seqs += len(quiet)
        # the running rows as they were (no one left: nothing preempts or finishes here), then the admitted
        scheduler.running = running + others[before:]
    if scheduler.preempted_this_step:
        raise RuntimeError("a step with quiet rows set aside preempted: the pool check let it through")
    index = core.num_steps
    core.num_steps += 1
    decodes = [c.num_tokens == 1 and bool(c.request.output_token_ids) for c in chunks]
    return ScheduledStep(index, chunks, decodes, started)


def take_run(core: EngineCore, steps: int, tokens_for, now: float) -> None:
    """`steps` decode-only steps for every running request (at most `Scan.run`); the last one ends at `now`.
    `tokens_for(request, n)`: its next n tokens."""
    for req in core.scheduler.running:
        req.output_token_ids.extend(tokens_for(req, steps))
        req.num_computed += steps
        req.last_token_time = now
    core.num_steps += steps


def take_quiet(quiet: list[Request], outputs: dict, fresh: int, now: float) -> int:
    """The quiet rows' tokens for the step that just ran (it ended at `now`): the recorded one from
    `outputs[request id]`, or a fresh id from `fresh` on. Returns the next fresh id."""
    for req in quiet:
        req.num_computed += 1
        recorded = outputs[req.request_id]
        if recorded is None:
            req.output_token_ids.append(fresh)
            fresh += 1
        else:
            req.output_token_ids.append(recorded.popleft())
        req.last_token_time = now
    return fresh
