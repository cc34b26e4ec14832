"""An edit carried out on the KV cache: where it cuts a request's block table, then the cut itself.

A causal model's K/V at position j depend only on tokens <= j, so an edit at m keeps the K/V of [0, m)
(engine/core/edits.py makes the new sequence). The cut is planned first (`TablePlan`: the whole blocks that
stay, the block cut inside and whether it is copied) and then applied. The blocks after the cut block go in
every outcome, so they are released before the plan is settled: a copy of the cut block may use one. With no
block for that copy the plan falls back to recomputing the cut block from its start.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.edits import EditedSequence
from engine.core.request import Request, Status


@dataclass(frozen=True)
class TablePlan:
    """K/V of [0, keep) stay: the whole blocks before `keep` stay as they are, the block holding `keep` (if
    `keep` is inside one) keeps its first keep % block_size tokens, copied first when `copy` and it is shared
    or cached, and every block after it is released."""

    keep: int
    # logical index of the block cut inside, or None
    partial: int | None
    # logical index of the first block released
    first_released: int
    copy: bool = True


def keep_point(num_computed: int, edited: EditedSequence) -> int:
    """Positions whose K/V an edit keeps: those before m that were computed, and never the last token (its
    logits pick the next token, so it is computed again)."""
    return max(0, min(num_computed, edited.position, len(edited.tokens) - 1))


def plan_table(keep: int, table_len: int, block_size: int, copy: bool = True) -> TablePlan:
    whole, inside = divmod(keep, block_size)
    whole = min(whole, table_len)
    partial = whole if inside and whole < table_len else None
    return TablePlan(keep, partial, whole + (partial is not None), copy)


class EditCuts:
    """The KV-cache manager's (engine/core/kv_cache.py) side of an edit."""

    def truncate(self, req: Request, edited: EditedSequence) -> dict:
        """Carry out an edit: keep the K/V of [0, keep), release the rest, and set the request's new tokens.

        A request that holds its cache (running, or waiting after an earlier edit) keeps what stays valid; a
        finished one re-attaches its cached prefix now, under its own lock, exactly as its readmission will use
        it, so the figures are what happens. The edited sequence is a new lookup for the hit rates.
        Returns the fields of the `invalidate` event: kept, dropped and copied blocks, first recomputed position.
        """
        holding = req.attached
        table, rid = req.block_table, req.request_id
        original = list(table)
        plan = self._plan_cut(req, edited, holding)
        keep = plan.keep
        copied = []
        if plan.partial is not None and plan.copy:
            src = table[plan.partial]
            dst = self.copy_on_write(table, plan.partial, rid, keep % self.block_size)
            if dst != src:
                copied.append([src, dst])
        kept = [b for b in table[: plan.first_released] if not copied or b != copied[0][1]]
        self.release_table(table, rid, plan.first_released)
        dropped = [b for b in original if b not in kept and not (copied and b == copied[0][0])]
        req.prompt_token_ids, req.output_token_ids = edited.prompt, edited.generated
        # tokens changed
        del req.block_keys[keep // self.block_size :], req.block_contents[keep // self.block_size :]
        req.num_computed = keep
        # the edited sequence is a new lookup (a preemption's readmission is not)
        req.matched_before = False
        if holding:
            self._relock_kept(req)
        elif req.status is Status.FINISHED:
            # prefix_match, ring_resume, shares and locks: what the readmission will use
            self.admit(req)
            keep = req.num_computed
            kept = req.block_table[: keep // self.block_size]
            # a reused partial block is cached or shared: copy it now, so the event says so and the table never
            # names a block whose rows hold another sequence's tokens
            whole, valid = divmod(keep, self.block_size)
            if valid and whole < len(req.block_table):
                src = req.block_table[whole]
                # with no block for the copy now, allocate_slots makes it before the first write
                if not self.needs_copy(src) or self.can_allocate(1):
                    dst = self.copy_on_write(req.block_table, whole, rid, valid)
                    if dst != src:
                        copied.append([src, dst])
        req.num_cached = min(req.num_cached, keep)
        return {"kept": kept, "dropped": dropped, "copied": copied, "first_recomputed": keep}

    def _plan_cut(self, req: Request, edited: EditedSequence, holding: bool) -> TablePlan:
        """Where the edit cuts the table, settled: the blocks after the cut block are released here (they go in
        every outcome), and with no block left for the cut block's copy it is recomputed from its start."""
        keep = keep_point(req.num_computed, edited)
        # window layers restart where their rings are exact (engine/core/rings.py)
        if holding:
            keep = self.rings.resume(req, keep, edited.tokens)
            # window_layout="paged": a block boundary where every window group still holds its window
            if self.groups.enabled:
                keep = self.groups.cut(req.request_id, keep)
        table = req.block_table
        plan = plan_table(keep, len(table), self.block_size)
        if plan.partial is None:
            return plan
        self.release_table(table, req.request_id, plan.first_released)
        if not self.needs_copy(table[plan.partial]) or self.can_allocate(1):
            return plan
        keep = plan.partial * self.block_size
        if holding:
            keep = self.rings.resume(req, keep, edited.tokens)
        return plan_table(keep, len(table), self.block_size, copy=False)

    def _relock_kept(self, req: Request) -> None:
        """After an edit cut the table: lock only the kept full blocks (they are already in the tree)."""
        full = min(req.num_computed // self.block_size, len(req.block_table), req.blocks_in_tree)
        tokens = req.tokens[: full * self.block_size]
        old = req.lock_node
        req.lock_node = self.prefix_cache.insert(
            tokens,
            req.block_table[:full],
            req.cache_salt,
            req.request_id,
            hashes=self.prefix_cache.hashes(req, tokens, full),
        )
        self.prefix_cache.lock(req.lock_node, req.request_id)
        self.prefix_cache.unlock(old, req.request_id)
        req.blocks_in_tree = full
