"""A deterministic synthetic trace for the UI tests: a toy engine that emits valid events, fast and without a model.

It is not the real engine (no model: token ids come from a random generator over a small word vocabulary),
but it follows the same rules, so every view has something true to show: a block pool with a free list and
ref counts, prefix matching over chained block hashes with a tree of one node per block, LRU eviction of
unlocked leaves, forks that share blocks and copy on write, edits that keep the blocks before m's block,
sliding-window ring writes, hit rates and token timings. The pool and the prefix tree are synthetic_cache.py.
"""

from __future__ import annotations

import json
import random
from collections import deque
from pathlib import Path

from tests.helpers.synthetic_cache import WORDS, SyntheticCache, SyntheticRequest


class SyntheticEngine(SyntheticCache):
    def __init__(
        self,
        seed: int = 0,
        block_size: int = 4,
        num_blocks: int = 64,
        window: int | None = None,
        step_time: float = 0.02,
    ):
        super().__init__(block_size, num_blocks)
        self.rng = random.Random(seed)
        self.window, self.step_time = window, step_time
        self.running: list[SyntheticRequest] = []
        self.waiting: deque[SyntheticRequest] = deque()
        self.step_no = 0
        self.n_req = 0
        self.header = {
            "type": "header",
            "schema": 1,
            "model": {
                "name": "synthetic",
                "layers": 4,
                "q_heads": 6,
                "kv_heads": 2,
                "head_dim": 16,
                "dtype": "float32",
                "elem_bytes": 4,
                "windows": [None, window, None, window] if window else [None] * 4,
            },
            "block_size": block_size,
            "num_blocks": num_blocks,
            "bytes_per_block": 2 * 4 * 2 * 16 * 4 * block_size,
            "bytes_per_token": 2 * 4 * 2 * 16 * 4,
            "config": {"synthetic": True, "seed": seed, "eviction": "lru", "prefix_cache": True},
        }

    def _ring(self, req: SyntheticRequest, start: int, end: int) -> None:
        if self.window:
            w = self.window
            evicted = [p - w for p in range(start, end) if p - w >= 0]
            self.emit(
                "ring_write", request_id=req.rid, group=0, window=w, start=start, end=end, evicted=evicted
            )

    def _emit_token(self, req: SyntheticRequest) -> None:
        token = self.rng.randrange(len(WORDS))
        position = len(req.tokens)
        req.tokens.append(token)
        req.generated += 1
        self.emit("token_emitted", request_id=req.rid, position=position, token_id=token, text=WORDS[token])
        req.first = self.t if req.first is None else req.first
        req.last = self.t

    # ------------------------------------------------------------------ the loop
    def submit(
        self, tokens: list[int], max_tokens: int, parent: SyntheticRequest | None = None
    ) -> SyntheticRequest:
        rid = f"r{self.n_req}"
        self.n_req += 1
        req = SyntheticRequest(rid, list(tokens), len(tokens), max_tokens, self.t)
        self.emit(
            "request_arrived",
            request_id=rid,
            prompt_token_ids=list(tokens),
            prompt_texts=self._texts(tokens),
            max_tokens=max_tokens,
            cache_salt=None,
            parent_id=parent.rid if parent else None,
        )
        # a fork shares every block of its parent, the partial last one included
        if parent is not None:
            for logical, p in enumerate(parent.table):
                self.ref[p] += 1
                req.table.append(p)
                self.emit("block_shared", physical=p, request_id=rid, logical=logical, ref_count=self.ref[p])
            self.emit("request_scheduled", request_id=rid, num_computed=len(tokens))
            self._emit_token(req)
            self.running.append(req)
        else:
            self.waiting.append(req)
        return req

    def _admit(self) -> None:
        while self.waiting and len(self.running) < 6:
            req = self.waiting[0]
            evictable = sum(
                1 for nid, kids in self.node_children.items() if nid and self.ref[self.node_block[nid]] == 0
            )
            need = (req.prompt_len + req.max_tokens) // self.bs + 2
            if len(self.free) + evictable < need:
                return
            self.waiting.popleft()
            matched = self._match(req)
            req.cached_tokens = matched
            self.emit("request_scheduled", request_id=req.rid, num_computed=matched)
            if not self._ensure_blocks(req, req.prompt_len):
                raise RuntimeError("synthetic pool too small")
            self.emit(
                "prefill_chunk", request_id=req.rid, step=self.step_no, start=matched, end=req.prompt_len
            )
            self._prefill_tokens += req.prompt_len - matched
            self._ring(req, matched, req.prompt_len)
            self._emit_token(req)
            self.running.append(req)

    def _edit(self, req: SyntheticRequest) -> None:
        rng, bs = self.rng, self.bs
        m = rng.randrange(1, len(req.tokens))
        kind = rng.choice(("replace", "insert", "delete"))
        new = [] if kind == "delete" else [rng.randrange(len(WORDS))]
        n_del = 0 if kind == "insert" else 1
        self.emit(
            "edit",
            request_id=req.rid,
            position=m,
            kind=kind,
            token_ids=new,
            texts=self._texts(new),
            num_deleted=n_del,
        )
        lb = m // bs
        kept, copied = req.table[:lb], []
        keep_partial = m % bs != 0 and lb < len(req.table)
        if keep_partial and (self.ref[req.table[lb]] > 1 or req.table[lb] in self.block_hash):
            src = req.table[lb]
            self._cow(req, m)
            copied.append([src, req.table[lb]])
        first_drop = lb + 1 if keep_partial else lb
        dropped = req.table[first_drop:]
        if keep_partial and not copied:
            kept = kept + [req.table[lb]]
        for logical in range(len(req.table) - 1, first_drop - 1, -1):
            self._release(req, logical)
        del req.table[first_drop:]
        if m < req.prompt_len:
            prompt = req.tokens[: req.prompt_len]
            prompt[m : m + n_del] = new
            req.tokens, req.prompt_len, req.generated = prompt, len(prompt), 0
        else:
            req.tokens[m:] = new
        self.emit(
            "invalidate",
            request_id=req.rid,
            kept=kept,
            dropped=dropped,
            copied=copied,
            first_recomputed=m,
            recompute_tokens=len(req.tokens) - m,
        )
        self._ensure_blocks(req, len(req.tokens))
        self.emit("prefill_chunk", request_id=req.rid, step=self.step_no, start=m, end=len(req.tokens))
        self._prefill_tokens += len(req.tokens) - m
        self._ring(req, m, len(req.tokens))
        self._emit_token(req)

    def _unlock(self, req: SyntheticRequest) -> None:
        if req.handle:
            self.emit("radix_unlock", node_id=req.handle, request_id=req.rid, lock_ref=0)
            req.handle = 0

    def _finish(self, req: SyntheticRequest) -> None:
        self._unlock(req)
        n = req.generated
        tpot = (req.last - req.first) / (n - 1) if n > 1 else None
        self.emit(
            "request_finished",
            request_id=req.rid,
            reason="length",
            num_prompt_tokens=req.prompt_len,
            num_output_tokens=n,
            cached_tokens=req.cached_tokens,
            ttft=req.first - req.arrived,
            tpot=tpot,
        )
        self._insert(req)
        for logical in range(len(req.table) - 1, -1, -1):
            self._release(req, logical)
        req.table.clear()

    def step(self, edit_rate: float = 0.0, fork_rate: float = 0.0) -> None:
        self._prefill_tokens = 0
        self._admit()
        n_decode = 0
        for req in list(self.running):
            if req.generated >= req.max_tokens:
                self.running.remove(req)
                self._finish(req)
                continue
            if edit_rate and self.rng.random() < edit_rate and len(req.tokens) > self.bs + 2:
                self._edit(req)
                continue
            # the last token's K/V is written now
            position = len(req.tokens) - 1
            if not self._ensure_blocks(req, position + 1) or not self._cow(req, position):
                self.running.remove(req)
                self._unlock(req)
                self.emit("request_preempted", request_id=req.rid, num_tokens=len(req.tokens))
                for logical in range(len(req.table) - 1, -1, -1):
                    self._release(req, logical)
                req.table.clear()
                self.waiting.appendleft(req)
                continue
            self.emit("decode", request_id=req.rid, step=self.step_no, position=position)
            self._ring(req, position, position + 1)
            self._emit_token(req)
            n_decode += 1
            if fork_rate and self.rng.random() < fork_rate and len(self.running) < 6:
                self.submit(list(req.tokens), max(2, req.max_tokens - req.generated), parent=req)
        self.t += self.step_time
        self.emit(
            "step",
            step=self.step_no,
            num_tokens=n_decode + self._prefill_tokens,
            num_prefill=int(self._prefill_tokens > 0),
            num_decode=n_decode,
            duration=self.step_time,
            free_blocks=len(self.free),
        )
        self.step_no += 1

    def release_locks(self) -> None:
        self.node_locks.clear()


def generate(
    num_requests: int = 12,
    seed: int = 0,
    block_size: int = 4,
    num_blocks: int = 64,
    window: int | None = None,
    edit_rate: float = 0.02,
    fork_rate: float = 0.01,
    max_events: int | None = None,
) -> tuple[dict, list[dict]]:
    """Header and events of a synthetic run: requests sharing a few system prompts, some edits and forks."""
    eng = SyntheticEngine(seed, block_size, num_blocks, window)
    eng._node_tokens = {}
    rng = random.Random(seed + 1)
    systems = [[rng.randrange(len(WORDS)) for _ in range(rng.randrange(6, 14))] for _ in range(3)]
    submitted = 0
    while submitted < num_requests or eng.running or eng.waiting:
        if max_events is not None and len(eng.events) >= max_events:
            break
        if submitted < num_requests and rng.random() < 0.5:
            prompt = systems[rng.randrange(3)] + [
                rng.randrange(len(WORDS)) for _ in range(rng.randrange(2, 9))
            ]
            eng.submit(prompt, rng.randrange(3, 12))
            submitted += 1
        eng.step(edit_rate=edit_rate, fork_rate=fork_rate)
        # locks only matter while admitting in this toy; clear so leaves stay evictable
        eng.node_locks = {}
    events = eng.events if max_events is None else eng.events[:max_events]
    return eng.header, events


def write_trace(path: str | Path, header: dict, events: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps(header, separators=(",", ":")) + "\n")
        for event in events:
            out.write(json.dumps(event, separators=(",", ":"), ensure_ascii=False) + "\n")
