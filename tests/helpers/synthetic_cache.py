"""The synthetic engine's cache (tests/helpers/synthetic.py): a block pool with a free list, ref counts and copy on
write, and a prefix tree of one node per block over chained block hashes, with LRU eviction of unlocked leaves
and a reason for every prefix miss. It emits the events the real engine would, on a toy vocabulary."""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass, field

from engine.trace.metrics import HitCounts, HitRateTracker

WORDS = (
    "the",
    " cat",
    " sat",
    " on",
    " a",
    " mat",
    ".",
    " You",
    " are",
    " helpful",
    " assistant",
    " Answer",
    " briefly",
    ",",
    " and",
    " why",
    " is",
    " sky",
    " blue",
    "?",
    " tell",
    " me",
    " about",
    " KV",
    " cache",
    " blocks",
    " tokens",
    " in",
    " of",
    " to",
    "\n",
    " it",
    " we",
    " can",
    " reuse",
    " prefix",
    " hello",
    " world",
    " story",
    " once",
    " upon",
    " time",
    " there",
    " was",
    " model",
    " fast",
    " slow",
    " edit",
)


@dataclass
class SyntheticRequest:
    rid: str
    tokens: list[int]
    prompt_len: int
    max_tokens: int
    arrived: float
    table: list[int] = field(default_factory=list)
    generated: int = 0
    first: float | None = None
    last: float | None = None
    cached_tokens: int = 0
    # deepest tree node it locked at admission (radix_lock), 0 = none
    handle: int = 0


class SyntheticCache:
    def __init__(self, block_size: int = 4, num_blocks: int = 64):
        self.bs, self.n = block_size, num_blocks
        self.events: list[dict] = []
        self.t = 0.0
        self.free: deque[int] = deque(range(num_blocks))
        self.ref = [0] * num_blocks
        self.block_hash: dict[int, str] = {}
        # chained hash -> radix node (one block per node here)
        self.hash_node: dict[str, int] = {}
        self.node_block: dict[int, int] = {}
        self.node_parent: dict[int, int] = {}
        self.node_hash: dict[int, str] = {}
        self.node_children: dict[int, set[int]] = {0: set()}
        self.node_access: dict[int, float] = {}
        self.node_locks: dict[int, int] = {}
        self.next_node = 1
        self.evicted_at: dict[str, float] = {}
        self.hit_rates = HitRateTracker(window=8)

    # ------------------------------------------------------------------ plumbing
    def emit(self, etype: str, **fields) -> None:
        self.t += 0.0001
        self.events.append({"seq": len(self.events), "t": round(self.t, 6), "type": etype, **fields})

    def _hash(self, parent: str, tokens: list[int]) -> str:
        return hashlib.blake2b(f"{parent}|{tokens}".encode(), digest_size=6).hexdigest()

    def _texts(self, ids: list[int]) -> list[str]:
        return [WORDS[i % len(WORDS)] for i in ids]

    def _take_block(self) -> int | None:
        if not self.free:
            self._evict_one()
        return self.free.popleft() if self.free else None

    def _evict_one(self) -> bool:
        """LRU over unlocked leaves whose block nobody references."""
        leaves = [
            nid
            for nid, kids in self.node_children.items()
            if nid and not kids and self.ref[self.node_block[nid]] == 0 and not self.node_locks.get(nid)
        ]
        if not leaves:
            return False
        nid = min(leaves, key=lambda x: (self.node_access[x], x))
        p, h = self.node_block.pop(nid), self.node_hash.pop(nid)
        self.node_children[self.node_parent[nid]].discard(nid)
        del self.node_children[nid], self.node_parent[nid], self.hash_node[h], self.block_hash[p]
        self.evicted_at[h] = self.t
        self.emit("block_evicted", physical=p, hash=h, policy="lru", node_id=nid)
        self.emit("radix_evict", node_id=nid)
        self.free.append(p)
        return True

    def _release(self, req: SyntheticRequest, logical: int) -> None:
        p = req.table[logical]
        self.ref[p] -= 1
        self.emit("block_released", physical=p, request_id=req.rid, logical=logical, ref_count=self.ref[p])
        if self.ref[p] == 0:
            if p in self.block_hash:
                self.emit("block_cached", physical=p, hash=self.block_hash[p])
            else:
                self.emit("block_freed", physical=p)
                self.free.append(p)

    def _ensure_blocks(self, req: SyntheticRequest, upto: int) -> bool:
        """Blocks for positions < upto; copy-on-write a shared block about to be written."""
        while len(req.table) * self.bs < upto:
            p = self._take_block()
            if p is None:
                return False
            self.ref[p] = 1
            req.table.append(p)
            self.emit("block_allocated", physical=p, request_id=req.rid, logical=len(req.table) - 1)
        return True

    def _cow(self, req: SyntheticRequest, position: int) -> bool:
        logical = position // self.bs
        src = req.table[logical]
        if self.ref[src] <= 1 and src not in self.block_hash:
            return True
        dst = self._take_block()
        if dst is None:
            return False
        self.ref[src] -= 1
        self.ref[dst] = 1
        req.table[logical] = dst
        self.emit(
            "block_copied",
            src=src,
            dst=dst,
            request_id=req.rid,
            logical=logical,
            num_tokens=position - logical * self.bs,
        )
        if self.ref[src] == 0:
            if src in self.block_hash:
                self.emit("block_cached", physical=src, hash=self.block_hash[src])
            else:
                self.emit("block_freed", physical=src)
                self.free.append(src)
        return True

    # ------------------------------------------------------------------ prefix cache
    def _match(self, req: SyntheticRequest) -> int:
        bs, toks = self.bs, req.tokens
        matchable = (req.prompt_len - 1) // bs
        parent_h, node, matched, reason, detail = "", 0, 0, "", {}
        if req.prompt_len <= bs:
            reason = "short_prompt"
        elif len(self.node_children) == 1:
            reason = "empty_cache"
        for i in range(matchable if not reason else 0):
            h = self._hash(parent_h, toks[i * bs : (i + 1) * bs])
            nid = self.hash_node.get(h)
            if nid is None:
                if h in self.evicted_at:
                    reason, detail = (
                        "evicted",
                        {"position": i * bs, "evicted_at": self.evicted_at[h], "policy": "lru"},
                    )
                else:
                    reason, detail = "divergent", self._divergence(node, toks, i)
                break
            p = self.node_block[nid]
            self.ref[p] += 1
            req.table.append(p)
            self.emit("block_shared", physical=p, request_id=req.rid, logical=i, ref_count=self.ref[p])
            self.emit("radix_hit", node_id=nid, request_id=req.rid, blocks=1)
            self.node_access[nid] = self.t
            self.node_locks[nid] = self.node_locks.get(nid, 0) + 1
            parent_h, node, matched = h, nid, (i + 1) * bs
        # the request uses the matched path until it finishes or is preempted, as the engine does
        if node:
            req.handle = node
            self.emit("radix_lock", node_id=node, request_id=req.rid, lock_ref=self.node_locks.get(node, 1))
        if not reason:
            reason = "full_match" if req.prompt_len - matched <= 1 else "block_floor"
            detail = {"position": matched, "block_size": bs}
        self.emit(
            "prefix_match",
            request_id=req.rid,
            prompt_tokens=req.prompt_len,
            matched_tokens=matched,
            reason=reason,
            detail=detail,
        )
        # engine/trace/metrics.py, as the engine
        self.hit_rates.add(HitCounts.lookup(req.prompt_len, matched, bs))
        self.emit("hit_rates", **self.hit_rates.event_fields())
        return matched

    def _divergence(self, node: int, toks: list[int], i: int) -> dict:
        bs = self.bs
        mine = toks[i * bs : (i + 1) * bs]
        best: tuple[int, int] | None = None
        for child in sorted(self.node_children.get(node, ())):
            h = self.node_hash[child]
            theirs = self._node_tokens.get(h, [])
            same = next((j for j, (a, b) in enumerate(zip(mine, theirs)) if a != b), len(mine))
            if best is None or same > best[0]:
                best = (same, child)
        if best is None:
            return {"position": i * bs, "note": "no cached continuation of the matched prefix"}
        same, child = best
        theirs = self._node_tokens[self.node_hash[child]]
        pos = i * bs + same
        exp = theirs[same] if same < len(theirs) else None
        return {
            "position": pos,
            "expected_id": exp,
            "expected_text": WORDS[exp] if exp is not None else None,
            "actual_id": toks[pos],
            "actual_text": WORDS[toks[pos]],
        }

    _node_tokens: dict

    def _insert(self, req: SyntheticRequest) -> None:
        """Put every full block of a finished request into the tree (one node per block)."""
        bs, parent_h, parent = self.bs, "", 0
        for i in range(len(req.tokens) // bs):
            if i >= len(req.table):
                break
            block = req.tokens[i * bs : (i + 1) * bs]
            h = self._hash(parent_h, block)
            nid = self.hash_node.get(h)
            if nid is None and req.table[i] not in self.block_hash:
                nid = self.next_node
                self.next_node += 1
                p = req.table[i]
                self.hash_node[h], self.node_hash[nid], self.node_block[nid] = nid, h, p
                self.node_parent[nid], self.node_children[nid] = parent, set()
                self.node_children[parent].add(nid)
                self.node_access[nid] = self.t
                self.block_hash[p] = h
                self._node_tokens[h] = block
                self.emit(
                    "radix_insert",
                    node_id=nid,
                    parent_id=parent,
                    blocks=[p],
                    token_ids=block,
                    texts=self._texts(block),
                    request_id=req.rid,
                )
            if nid is None:
                break
            parent_h, parent = h, nid
