"""What the engine does with the prefix cache over a request's life: attach at admission, cache blocks as they
fill, detach at finish or preemption. With the cache off it still explains every miss ("disabled").

A request's regions: [0, num_cached) shared from the tree at admission; [num_cached, num_computed) computed
by the request, whose full blocks enter the tree as they fill (so a preempted or edited request, or the next
turn of a chat, finds them); [num_computed, end) still to compute.
"""

from __future__ import annotations

from typing import Callable

from engine.blocks import BlockPool
from engine.metrics import HitRateTracker
from engine.radix import PrefixMatch, RadixCache
from engine.request import Request
from engine.trace import TraceSink


class PrefixCaching:
    def __init__(self, pool: BlockPool, trace: TraceSink, enabled: bool, policy: str, window: int,
                 token_text: Callable[[int], str]):
        self.pool = pool
        self.trace = trace
        self.token_text = token_text
        self.radix = RadixCache(pool, trace, policy, token_text=token_text) if enabled else None
        self.hit_rates = HitRateTracker(window)
        self.usable_prefix: Callable[[Request, int], int] = lambda req, tokens: tokens  # window layers may need less

    def match(self, tokens: list[int], cache_salt: str | None) -> PrefixMatch:
        if self.radix is None:
            return PrefixMatch.disabled(len(tokens), self.pool.block_size)
        return self.radix.match(tokens, cache_salt)

    def probe(self, tokens: list[int], cache_salt: str | None) -> PrefixMatch:
        """What admission would reuse, whole blocks and the leading tokens of one more; changes nothing."""
        match = self.match(tokens, cache_salt)
        partial = self.radix.reuse_partial(match, tokens, cache_salt) if self.radix is not None else None
        if partial is not None:
            match.partial_tokens = partial[1]
        return match

    def attach(self, req: Request) -> None:
        """Admission: share the longest cached prefix, lock its path, explain the match, count the hit."""
        match = self.match(req.tokens, req.cache_salt)
        partial = self.radix.reuse_partial(match, req.tokens, req.cache_salt) if self.radix is not None else None
        whole = match.num_tokens
        usable = self.usable_prefix(req, whole + (partial[1] if partial else 0))  # one ring restart, at most
        if usable < whole:  # see engine.ring: window layers need the positions before the match
            keep = usable // self.pool.block_size
            match.detail = {**match.detail, "matched_blocks": len(match.blocks), "window_backoff": True}
            match.blocks, match.keys, match.reason = match.blocks[:keep], match.keys[:keep], "window"
            partial = None
        elif partial is not None and usable - whole < partial[1]:
            partial = (partial[0], usable - whole) if usable > whole else None
        for logical, physical in enumerate(match.blocks):
            self.pool.share(physical, req.request_id, logical)
            req.block_table.append(physical)
        if self.radix is not None:
            req.lock_node = self.radix.acquire(match, req.request_id)
        if partial is not None:  # the block is cached: the scheduler copies it before the first write
            physical, same = partial
            self.pool.share(physical, req.request_id, len(match.blocks))
            req.block_table.append(physical)
            match.partial_tokens = same
            match.detail = {**match.detail, "reused_partial": same}
            if match.num_tokens == match.matchable_tokens:  # every token but the last came from the cache
                match.reason = "full_match"
        req.num_computed = req.num_cached = match.num_tokens
        req.blocks_in_tree = len(match.blocks)
        fields = match.event_fields(req.request_id, self.token_text)
        first_time = not req.matched_before
        if not first_time:
            fields["detail"] = {**fields["detail"], "readmission": True}  # not counted again in hit rates
        self.trace.emit("prefix_match", **fields)
        if first_time:
            req.matched_before = True
            self.hit_rates.record_match(match)
            self.trace.emit("hit_rates", **self.hit_rates.event_fields())

    def cache_computed(self, req: Request) -> None:
        """Put the request's newly filled blocks into the tree and move its lock to the end of its path."""
        if self.radix is None:
            return
        full = min(req.num_computed // self.pool.block_size, len(req.block_table))
        if full <= req.blocks_in_tree:
            return
        tokens = req.tokens[:full * self.pool.block_size]
        req.lock_node = self.radix.insert(tokens, req.block_table[:full], req.cache_salt, req.request_id,
                                          [self.token_text(t) for t in tokens], locked=req.lock_node)
        req.blocks_in_tree = full

    def detach(self, req: Request) -> None:
        """Finish or preemption: cache what it computed, drop its lock, release its blocks (tree ones stay)."""
        self.cache_computed(req)
        if self.radix is not None:
            self.radix.insert_tail(req.tokens, req.block_table, req.num_computed, req.cache_salt)
        if self.radix is not None and req.lock_node is not None:
            self.radix.unlock(req.lock_node)
        req.lock_node = None
        self.pool.release_table(req.block_table, req.request_id)
        req.blocks_in_tree = 0

    def truncated(self, req: Request) -> None:
        """After an edit cut the table: lock only the kept full blocks (they are already in the tree)."""
        if self.radix is None:
            return
        full = min(req.num_computed // self.pool.block_size, len(req.block_table), req.blocks_in_tree)
        tokens = req.tokens[:full * self.pool.block_size]
        old = req.lock_node
        req.lock_node = self.radix.insert(tokens, req.block_table[:full], req.cache_salt, req.request_id,
                                          [self.token_text(t) for t in tokens])
        self.radix.lock(req.lock_node)
        if old is not None:
            self.radix.unlock(old)
        req.blocks_in_tree = full

    def share_lock(self, parent: Request, child: Request) -> None:
        """A fork uses its parent's path too."""
        if self.radix is not None and parent.lock_node is not None:
            self.radix.lock(parent.lock_node)
            child.lock_node = parent.lock_node
        child.blocks_in_tree = parent.blocks_in_tree
        child.matched_before = True
