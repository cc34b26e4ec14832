"""Quiet rows: running decodes whose next tokens only land in slots they hold, taken in bulk by an engine core
that writes no step events (kvtui's what-if worker). The scheduler and the step's bookkeeping run for the
other rows only.

A running request is *quiet* in the next step when that step only appends one token into a block it already
holds: it decodes, the slot is allocated, the block needs no copy, nothing enters the prefix tree (no block
fills while generated tokens are cached, none is pending), and it does not stop (no stop token or eos can
end it, and it is short of max_tokens: the rules of `EngineCore.may_stop_within`). The engine's calls for
such a row allocate, evict, preempt and emit nothing; they only spend one token of the step's budget and one
of its sequences. A production-shaped run has dozens of them in every step that admits or finishes someone,
and their bookkeeping is most of a run's time.

`scan` finds them, and its `Scan` is the core's proof: the rules are checked there, once a row a step, and
the core takes a scan only from the step it was made in. When every running request is quiet and nobody
waits, the steps ahead are a decode run: as many as every row stays quiet for are taken at once
(`EngineCore.decode_run`: only tokens, counts and the clock move). Otherwise a step sets the quiet rows aside
(`EngineCore.schedule(set_aside=scan)`) when the scheduler finds that this changes nothing it decides
(`Scheduler.can_set_aside`), and they take their tokens after the others' (their order among fresh ids
differs; fresh ids are unique either way, and recorded tokens are per request).
tests/kvtui/whatif/test_quiet_rows.py compares every figure with the ordinary steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engine.core.request import Request

# the next n tokens of each of the rows, row after row in one flat list
TokensFor = Callable[[Sequence[Request], int], Sequence[int]]


class Scan:
    """The quiet rows of the step numbered `step`, in running order, and how many decode-only steps lie ahead
    (0 unless every running request is quiet and nobody waits)."""

    __slots__ = ("quiet", "ids", "run", "step")

    def __init__(self, quiet: list[Request], run: int, step: int):
        self.quiet, self.run, self.step = quiet, run, step
        # for the scheduler's membership tests (made once a step, not once a question)
        self.ids = {id(req) for req in quiet}


def scan(core, own: dict) -> Scan:
    """One pass over the running requests. `own`: request id -> the block it was last seen writing into
    unshared (a running request's partly filled block stays its own until it fills: no copy check again;
    the caller forgets a request that finishes or is preempted)."""
    scheduler, manager = core.scheduler, core.cache
    # window_layout="paged": a decode's allocate_slots gives back what left its window groups' windows
    if manager.groups.enabled:
        return Scan([], 0, core.num_steps)
    bs = manager.block_size
    cache_generated = manager.cache_generated
    needs_copy = manager.needs_copy
    # eos ends a request that does not ignore it (the core's stop rules, EngineCore.may_stop_within)
    eos = bool(core.eos_ids)
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
        params = req.params
        if params.stop_token_ids or (eos and not params.ignore_eos):
            everyone = False
            continue
        left = params.max_tokens - (len(output) - req.generation_start) - 1
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
    return Scan(quiet, run if everyone and quiet else 0, core.num_steps)


class QuietRows:
    """The engine core's (engine/core/engine_core.py) bulk path for quiet rows."""

    def checked_scan(self, found: Scan) -> Scan:
        if self.step_events:
            raise ValueError("quiet rows are taken only by a core that writes no step events")
        if found.step != self.num_steps:
            raise ValueError(f"a scan of step {found.step} used at step {self.num_steps}: scan again")
        return found

    def append_quiet(self, rows: Sequence[Request], steps: int, tokens_for: TokensFor) -> None:
        """`steps` more tokens for each of `rows`, quiet for that many by a checked `Scan` (so none stops and
        none needs a block); a block enters the tree only when a row's tokens cross into the next one (its
        tree was current after its last token: update_from_output and this method both cache after
        appending)."""
        now = self.trace.now()
        size = self.cache.block_size
        cache_blocks = self.cache.cache_blocks
        tokens = tokens_for(rows, steps)
        if steps == 1:
            # most calls: the quiet rows of one step
            for req, token in zip(rows, tokens):
                req.output_token_ids.append(token)
                req.num_computed = computed = req.num_computed + 1
                req.last_token_time = now
                if not computed % size:
                    cache_blocks(req)
            return
        for i, req in enumerate(rows):
            req.output_token_ids.extend(tokens[i * steps : (i + 1) * steps])
            before = req.num_computed
            req.num_computed = before + steps
            req.last_token_time = now
            if (before + steps) // size != before // size:
                cache_blocks(req)

    def decode_run(self, found: Scan, steps: int, tokens_for: TokensFor) -> None:
        """`steps` decode-only steps, at most `found.run`, in which every running request is quiet, at once;
        the trace clock stands at the end of the last."""
        if not 0 < steps <= self.checked_scan(found).run:
            raise ValueError(f"{steps} steps in a decode run of {found.run}")
        self.append_quiet(found.quiet, steps, tokens_for)
        self.num_steps += steps
