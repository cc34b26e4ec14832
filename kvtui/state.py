"""The pure reducer: trace events -> `CacheState`, shared by live and replay.

`CacheState.apply(event)` folds one event in. Everything the views draw is here: the block pool (ref counts,
owners, hashes, cached/free), every block table, the requests with their tokens and timings, the radix tree,
the sliding-window rings, the miss explainer, the last edit and the metrics history.

Speed matters (a replay ingests hundreds of thousands of events per second, and seeking copies states), so:
- pool facts live in flat lists indexed by physical block, not in one object per block;
- metrics history is append-only and shared by every state of one trace (`History`); a state only records how
  much of it it has seen, so copying a state never copies the history;
- requests and radix nodes are copied on write: a snapshot shares them and the first mutation copies just
  that one object.
`Timeline` (kvtui/timeline.py) keeps keyframes (snapshots every N events) so `state_at(k)` is fast.
"""

from __future__ import annotations

import copy as _copy
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

# Block states as the pool view draws them.
FREE, USED, SHARED, CACHED, WRITING = "free", "used", "shared", "cached", "writing"

# A request's lifecycle as the timeline draws it.
WAITING, RUNNING, PREEMPTED, FINISHED = "waiting", "running", "preempted", "finished"

_FREE, _HELD, _CACHED = 0, 1, 2  # CacheState.kind values

# Copy-on-write ownership: a state may mutate a Request / RadixNode / Ring in place only if the object's `owner`
# equals the state's `_gen`; a snapshot gives both sides fresh generations, so shared objects get copied on
# their first mutation. (A token per snapshot, not a set of shared ids: O(1) per snapshot.)
_GENERATIONS = itertools.count(1)


@dataclass(slots=True)
class Request:
    """One request: its sequence (prompt + generated, each token with its text) and what happened to it."""

    request_id: str
    ordinal: int  # arrival order, 0-based: stable colors and lane order
    prompt_len: int
    token_ids: list[int]
    texts: list[str]
    max_tokens: int = 0
    cache_salt: str | None = None
    parent_id: str | None = None
    status: str = WAITING
    arrived: float = 0.0
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    finished: float | None = None
    num_computed: int = 0
    cached_tokens: int = 0
    reason: str | None = None
    ttft: float | None = None
    tpot: float | None = None
    num_output: int = 0
    match: dict | None = None  # the prefix_match event: the miss explainer
    # Timeline marks: (t, kind, step) with kind in arrived/scheduled/prefill/decode/edit/preempted/finished.
    marks: list[tuple[float, str, int]] = field(default_factory=list)
    edits: list[dict] = field(default_factory=list)
    locked: list[int] = field(default_factory=list)  # radix nodes this request holds a lock ref on
    ring_resume: dict | None = None  # the last ring_resume event (window layers restarting after an edit/hit)
    sink_divergence: dict | None = None  # attention sinks vs full attention, when the run used sinks
    owner: int = 0

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    def copy(self) -> "Request":
        new = _copy.copy(self)
        new.token_ids = list(self.token_ids)
        new.texts = list(self.texts)
        new.marks = list(self.marks)
        new.edits = list(self.edits)
        new.locked = list(self.locked)
        return new


@dataclass(slots=True)
class RadixNode:
    """A node of the prefix tree: a run of whole blocks and their tokens."""

    node_id: int
    parent_id: int
    blocks: list[int]
    token_ids: list[int]
    texts: list[str]
    children: list[int] = field(default_factory=list)
    hits: int = 0
    lockers: list[str] = field(default_factory=list)  # running requests that use it (lock refs)
    created: float = 0.0
    last_access: float = 0.0
    mark: str = ""  # the last thing that happened to it: insert | hit | split
    mark_seq: int = -1
    owner: int = 0

    def copy(self) -> "RadixNode":
        new = _copy.copy(self)
        new.blocks = list(self.blocks)
        new.token_ids = list(self.token_ids)
        new.texts = list(self.texts)
        new.children = list(self.children)
        new.lockers = list(self.lockers)
        return new


@dataclass(slots=True)
class Ring:
    """A sliding-window ring of one request and one window-layer group: slot = position mod W."""

    request_id: str
    group: int
    window: int
    slots: list[int]  # position held by each slot, -1 = empty
    head: int = 0  # next slot to be written
    writes: int = 0
    last_written: list[int] = field(default_factory=list)
    last_evicted: list[int] = field(default_factory=list)
    overwrites: int = 0
    owner: int = 0
    sinks: int = 0  # attention sinks: positions < sinks stay in slots 0..sinks-1; the ring proper follows

    def slot_of(self, position: int) -> int:
        return position if position < self.sinks else self.sinks + position % self.window

    def copy(self) -> "Ring":
        new = _copy.copy(self)
        new.slots = list(self.slots)
        new.last_written = list(self.last_written)
        new.last_evicted = list(self.last_evicted)
        return new


class History:
    """Append-only metrics samples of one trace; states index into it by length (see module docstring)."""

    def __init__(self) -> None:
        # One row per `step` event: (t, step, used, cached, free, num_tokens, duration, seq).
        self.steps: list[tuple] = []
        # One row per `hit_rates` event: (t, token, request, block, w_token, w_request, w_block, seq).
        self.hits: list[tuple] = []
        # Inter-token latencies in emission order: (t, seconds).
        self.itl: list[tuple[float, float]] = []


class CacheState:
    """Everything known about the cache after `index` events. Mutated only by `apply`."""

    def __init__(self, header: dict, history: History | None = None):
        self.header = header
        self.block_size: int = int(header.get("block_size") or 16)
        n = self.num_blocks = int(header.get("num_blocks") or 0)
        self.bytes_per_block: int = int(header.get("bytes_per_block") or 0)
        self.bytes_per_token: int = int(header.get("bytes_per_token") or 0)
        self.history = history if history is not None else History()
        self.index = 0  # events applied
        self.seq = -1
        self.t = 0.0
        self.step = -1
        # --- the pool, flat lists by physical block
        self.ref = [0] * n
        self.kind = bytearray(n)  # _FREE, _HELD (in some table, or released but not yet freed/cached), _CACHED
        # Owners of each block as an immutable tuple of (request_id, logical): snapshots copy only the list.
        self.owners: list[tuple[tuple[str, int], ...]] = [()] * n
        self.block_hash: list[str | None] = [None] * n
        self.born: list[float] = [0.0] * n
        self.block_node: dict[int, int] = {}
        self.writing: set[int] = set()
        self._writing_step = -1
        self.n_free = n
        self.n_cached = 0
        # --- requests and their block tables
        self.tables: dict[str, list[int]] = {}
        self.requests: dict[str, Request] = {}
        self.order: list[str] = []  # request ids by arrival
        # --- radix tree (root = 0), rings
        self.nodes: dict[int, RadixNode] = {0: RadixNode(0, -1, [], [], [])}
        self.evicted_nodes: list[tuple[int, float, str]] = []  # (node_id, t, text) recent evictions
        self.rings: dict[tuple[str, int], Ring] = {}
        # --- metrics and edits
        self.hit_rates: dict | None = None
        self.n_steps = 0  # history.steps rows this state has seen
        self.n_hits = 0
        self.n_itl = 0
        self.last_edit: dict | None = None
        self.last_invalidate: dict | None = None
        self.counts: dict[str, int] = {}
        self.evictions = 0
        self.preemptions = 0
        self.last_event: dict | None = None
        self._gen = next(_GENERATIONS)  # copy-on-write ownership (see _GENERATIONS)
        self.nodes[0].owner = self._gen

    # ------------------------------------------------------------------ snapshots
    def snapshot(self) -> "CacheState":
        """A copy that later `apply` calls on either side never disturb (cheap: objects are copied on write)."""
        new = CacheState.__new__(CacheState)
        new.__dict__.update(self.__dict__)
        new.ref = list(self.ref)
        new.kind = bytearray(self.kind)
        new.owners = list(self.owners)
        new.block_hash = list(self.block_hash)
        new.born = list(self.born)
        new.block_node = dict(self.block_node)
        new.writing = set(self.writing)
        new.tables = {k: list(v) for k, v in self.tables.items()}
        new.requests = dict(self.requests)
        new.order = list(self.order)
        new.nodes = dict(self.nodes)
        new.evicted_nodes = list(self.evicted_nodes)
        new.rings = dict(self.rings)
        new.counts = dict(self.counts)
        self._gen, new._gen = next(_GENERATIONS), next(_GENERATIONS)
        return new

    def _req(self, rid: str) -> Request | None:
        """The request, owned by this state (copied first if a snapshot shares it)."""
        req = self.requests.get(rid)
        if req is not None and req.owner != self._gen:
            req = self.requests[rid] = req.copy()
            req.owner = self._gen
        return req

    def _node(self, node_id: int) -> RadixNode | None:
        node = self.nodes.get(node_id)
        if node is not None and node.owner != self._gen:
            node = self.nodes[node_id] = node.copy()
            node.owner = self._gen
        return node

    # ------------------------------------------------------------------ derived views
    @property
    def n_used(self) -> int:
        return self.num_blocks - self.n_free - self.n_cached

    def block_state(self, physical: int) -> str:
        kind = self.kind[physical]
        if kind != _HELD:
            return FREE if kind == _FREE else CACHED
        if physical in self.writing:
            return WRITING
        return SHARED if self.ref[physical] > 1 else USED

    def block_tokens(self, physical: int) -> tuple[list[int], list[str]]:
        """The tokens a block holds: from an owner's sequence, else from its radix node."""
        bs = self.block_size
        for rid, logical in self.owners[physical]:
            req = self.requests.get(rid)
            if req is not None:
                lo = logical * bs
                return req.token_ids[lo:lo + bs], req.texts[lo:lo + bs]
        node_id = self.block_node.get(physical)
        node = self.nodes.get(node_id) if node_id is not None else None
        if node is not None and physical in node.blocks:
            lo = node.blocks.index(physical) * bs
            return node.token_ids[lo:lo + bs], node.texts[lo:lo + bs]
        return [], []

    def history_steps(self) -> list[tuple]:
        return self.history.steps[:self.n_steps]

    def history_hits(self) -> list[tuple]:
        return self.history.hits[:self.n_hits]

    def itl_values(self, last: int | None = None) -> list[float]:
        lo = 0 if last is None else max(0, self.n_itl - last)
        return [gap for _, gap in self.history.itl[lo:self.n_itl]]

    def radix_rows(self) -> list[tuple[int, int]]:
        """The tree flattened depth-first: (depth, node_id) for every node under the root."""
        rows: list[tuple[int, int]] = []
        stack = [(0, child) for child in reversed(self.nodes[0].children)]
        nodes = self.nodes
        while stack:
            depth, node_id = stack.pop()
            node = nodes.get(node_id)
            if node is None:
                continue
            rows.append((depth, node_id))
            stack.extend((depth + 1, child) for child in reversed(node.children))
        return rows

    def cached_path(self, token_ids: list[int]) -> list[tuple[int, int]]:
        """(node_id, physical) of each whole block of `token_ids` the prefix tree still holds, from position 0.

        What a request left behind once it finished: the probe match its next turn or edit would get.
        """
        bs = self.block_size
        out: list[tuple[int, int]] = []
        node, pos = self.nodes[0], 0
        while True:
            nxt = None
            for child_id in node.children:
                child = self.nodes.get(child_id)
                if child is not None and child.token_ids[:bs] == token_ids[pos:pos + bs] and len(child.token_ids) >= bs:
                    nxt = child
                    break
            if nxt is None:
                return out
            for i, p in enumerate(nxt.blocks):
                lo = i * bs
                if len(token_ids) < pos + bs or nxt.token_ids[lo:lo + bs] != token_ids[pos:pos + bs]:
                    return out
                out.append((nxt.node_id, p))
                pos += bs
            node = nxt

    # ------------------------------------------------------------------ the reducer
    def apply(self, event: dict) -> None:
        etype = event["type"]
        handler = _HANDLERS.get(etype)
        if handler is not None:
            handler(self, event)
        self.counts[etype] = self.counts.get(etype, 0) + 1
        self.index += 1
        self.seq = event["seq"]
        self.t = event["t"]
        self.last_event = event

    def apply_all(self, events) -> None:
        apply = self.apply
        for event in events:
            apply(event)

    # --- requests and scheduling
    def _on_request_arrived(self, ev: dict) -> None:
        rid = ev["request_id"]
        ids = list(ev["prompt_token_ids"])
        texts = list(ev["prompt_texts"])
        old = self.requests.get(rid)
        if old is None:
            self.order.append(rid)
        ordinal = old.ordinal if old is not None else len(self.order) - 1
        parent = self.requests.get(ev.get("parent_id") or "")
        prompt_len = len(ids)
        if parent is not None and parent.token_ids[:len(ids)] == ids:
            # A fork carries only the prompt, but shares the parent's whole sequence so far (its next token
            # is emitted at the parent's next position).
            ids, texts = list(parent.token_ids), list(parent.texts)
        self.requests[rid] = Request(
            rid, ordinal, prompt_len, ids, texts, max_tokens=ev.get("max_tokens", 0), cache_salt=ev.get("cache_salt"),
            parent_id=ev.get("parent_id"), arrived=ev["t"], marks=[(ev["t"], "arrived", self.step)], owner=self._gen)

    def _on_request_scheduled(self, ev: dict) -> None:
        req = self._req(ev["request_id"])
        if req is None:
            return
        req.status = RUNNING
        req.scheduled = ev["t"]
        req.num_computed = ev["num_computed"]
        req.marks.append((ev["t"], "scheduled", self.step))

    def _on_request_preempted(self, ev: dict) -> None:
        self.preemptions += 1
        req = self._req(ev["request_id"])
        if req is not None:
            req.status = PREEMPTED
            req.marks.append((ev["t"], "preempted", self.step))

    def _mark_writing(self, rid: str, step: int, first_logical: int, last_logical: int) -> None:
        if step != self._writing_step:
            self.writing = set()
            self._writing_step = step
        table = self.tables.get(rid)
        if not table:
            return
        if first_logical == last_logical:  # a decode: one block
            if first_logical < len(table) and table[first_logical] >= 0:
                self.writing.add(table[first_logical])
            return
        for logical in range(first_logical, min(last_logical, len(table) - 1) + 1):
            if table[logical] >= 0:
                self.writing.add(table[logical])

    def _on_prefill_chunk(self, ev: dict) -> None:
        rid, step = ev["request_id"], ev["step"]
        req = self._req(rid)
        if req is not None:
            req.status = RUNNING
            req.marks.append((ev["t"], "prefill", step))
        bs = self.block_size
        self._mark_writing(rid, step, ev["start"] // bs, max(ev["start"], ev["end"] - 1) // bs)

    def _on_decode(self, ev: dict) -> None:
        rid, step = ev["request_id"], ev["step"]
        req = self._req(rid)
        if req is not None:
            req.status = RUNNING
            req.marks.append((ev["t"], "decode", step))
        logical = ev["position"] // self.block_size
        self._mark_writing(rid, step, logical, logical)

    def _on_step(self, ev: dict) -> None:
        self.step = ev["step"]
        hist = self.history.steps
        if self.n_steps == len(hist):
            hist.append((ev["t"], ev["step"], self.n_used, self.n_cached, self.n_free, ev["num_tokens"],
                         ev["duration"], ev["seq"]))
        self.n_steps += 1

    def _on_token_emitted(self, ev: dict) -> None:
        req = self._req(ev["request_id"])
        if req is None:
            return
        t, position = ev["t"], ev["position"]
        # The emitted position is authoritative: anything at or after it is an older continuation.
        if position < len(req.token_ids):
            del req.token_ids[position:]
            del req.texts[position:]
        elif position > len(req.token_ids):  # tokens this trace never showed: keep positions aligned
            gap = position - len(req.token_ids)
            req.token_ids.extend([-1] * gap)
            req.texts.extend(["�"] * gap)
        req.token_ids.append(ev["token_id"])
        req.texts.append(ev["text"])
        req.num_output = len(req.token_ids) - req.prompt_len
        if req.first_token is None:
            req.first_token = t
            req.ttft = t - req.arrived
        if req.last_token is not None:
            itl = self.history.itl
            if self.n_itl == len(itl):
                itl.append((t, t - req.last_token))
            self.n_itl += 1
        req.last_token = t

    def _on_request_finished(self, ev: dict) -> None:
        rid = ev["request_id"]
        req = self._req(rid)
        if req is not None:
            req.status = FINISHED
            req.finished = ev["t"]
            req.reason = ev["reason"]
            req.cached_tokens = ev["cached_tokens"]
            if ev.get("ttft") is not None:
                req.ttft = ev["ttft"]
            req.tpot = ev.get("tpot")
            req.marks.append((ev["t"], "finished", self.step))
            # Finished requests no longer lock their radix path.
            for node_id in req.locked:
                node = self._node(node_id)
                if node is not None and rid in node.lockers:
                    node.lockers.remove(rid)
            req.locked = []

    # --- the pool
    def _set_kind(self, p: int, kind: int) -> None:
        old = self.kind[p]
        if old == kind:
            return
        if old == _FREE:
            self.n_free -= 1
        elif old == _CACHED:
            self.n_cached -= 1
        if kind == _FREE:
            self.n_free += 1
        elif kind == _CACHED:
            self.n_cached += 1
        self.kind[p] = kind

    def _on_block_allocated(self, ev: dict) -> None:
        p, rid, logical = ev["physical"], ev["request_id"], ev["logical"]
        self._set_kind(p, _HELD)
        self.ref[p] = 1
        self.owners[p] = ((rid, logical),)
        self.block_hash[p] = None
        self.born[p] = ev["t"]
        self.block_node.pop(p, None)
        self._set_table(rid, logical, p)

    def _set_table(self, rid: str, logical: int, physical: int) -> None:
        table = self.tables.get(rid)
        if table is None:
            table = self.tables[rid] = []
        if logical >= len(table):
            table.extend([-1] * (logical + 1 - len(table)))
        table[logical] = physical

    def _drop_from_table(self, rid: str, logical: int, physical: int) -> None:
        table = self.tables.get(rid)
        if table is None or logical >= len(table) or table[logical] != physical:
            return
        table[logical] = -1
        while table and table[-1] < 0:
            table.pop()
        if not table:
            del self.tables[rid]

    def _on_block_shared(self, ev: dict) -> None:
        p, rid, logical = ev["physical"], ev["request_id"], ev["logical"]
        self._set_kind(p, _HELD)  # a hit on a cached block brings it back into use
        self.ref[p] = ev["ref_count"]
        if (rid, logical) not in self.owners[p]:
            self.owners[p] += ((rid, logical),)
        self._set_table(rid, logical, p)

    def _on_block_released(self, ev: dict) -> None:
        p, rid, logical = ev["physical"], ev["request_id"], ev["logical"]
        self._drop_owner(p, rid, logical)
        self.ref[p] = ev["ref_count"]
        self._drop_from_table(rid, logical, p)
        self.writing.discard(p)

    def _drop_owner(self, p: int, rid: str, logical: int) -> bool:
        owners = self.owners[p]
        if (rid, logical) not in owners:
            return False
        self.owners[p] = tuple(o for o in owners if o != (rid, logical))
        return True

    def _on_block_freed(self, ev: dict) -> None:
        p = ev["physical"]
        self._set_kind(p, _FREE)
        self.ref[p] = 0
        self.owners[p] = ()
        self.block_hash[p] = None
        self.block_node.pop(p, None)
        self.writing.discard(p)

    def _on_block_copied(self, ev: dict) -> None:
        src, dst, rid, logical = ev["src"], ev["dst"], ev["request_id"], ev["logical"]
        if self._drop_owner(src, rid, logical):
            self.ref[src] = max(0, self.ref[src] - 1)
        if (rid, logical) not in self.owners[dst]:
            self._set_kind(dst, _HELD)
            self.owners[dst] += ((rid, logical),)
            self.ref[dst] = max(1, len(self.owners[dst]))
            self.born[dst] = ev["t"]
        self._set_table(rid, logical, dst)

    # --- the prefix cache
    def _on_block_cached(self, ev: dict) -> None:
        p = ev["physical"]
        self._set_kind(p, _CACHED)
        self.ref[p] = 0
        self.owners[p] = ()
        self.block_hash[p] = ev["hash"]
        self.writing.discard(p)

    def _on_block_evicted(self, ev: dict) -> None:
        self.evictions += 1
        p = ev["physical"]
        if self.kind[p] == _CACHED:
            self._set_kind(p, _FREE)
        self.block_hash[p] = None
        node_id = self.block_node.pop(p, None)
        if node_id is None:
            node_id = ev.get("node_id")
        # Eviction takes one block at a time from the end of a leaf: the node shrinks by that block (and all
        # after it); `radix_evict` follows only when the node is empty.
        node = self.nodes.get(node_id) if node_id is not None else None
        if node is not None and p in node.blocks:
            node = self._node(node_id)
            i = node.blocks.index(p)
            for q in node.blocks[i + 1:]:
                self.block_node.pop(q, None)
            cut = i * self.block_size
            node.blocks, node.token_ids, node.texts = node.blocks[:i], node.token_ids[:cut], node.texts[:cut]
            node.mark, node.mark_seq = "evict", ev["seq"]

    def _on_radix_insert(self, ev: dict) -> None:
        node_id, parent_id = ev["node_id"], ev["parent_id"]
        t = ev["t"]
        rid = ev.get("request_id")
        self.nodes[node_id] = RadixNode(node_id, parent_id, list(ev["blocks"]), list(ev["token_ids"]),
                                        list(ev["texts"]), created=t, last_access=t, mark="insert",
                                        mark_seq=ev["seq"], owner=self._gen)
        parent = self._node(parent_id)
        if parent is not None:
            parent.children.append(node_id)
        for p in ev["blocks"]:
            self.block_node[p] = node_id
        self._lock(rid, node_id)

    def _lock(self, rid: str | None, node_id: int) -> None:
        """A running request holds a lock ref on the nodes it uses until it finishes."""
        req = self._req(rid) if rid else None
        if req is None or req.status == FINISHED:
            return
        if node_id not in req.locked:
            req.locked.append(node_id)
        node = self._node(node_id)
        if node is not None and rid not in node.lockers:
            node.lockers.append(rid)

    def _on_radix_split(self, ev: dict) -> None:
        node = self._node(ev["node_id"])
        if node is None:
            return
        at, new_id = ev["at"], ev["new_node_id"]
        cut = at * self.block_size
        child = RadixNode(new_id, node.node_id, node.blocks[at:], node.token_ids[cut:], node.texts[cut:],
                          children=node.children, hits=node.hits, lockers=list(node.lockers), created=ev["t"],
                          last_access=node.last_access, mark="split", mark_seq=ev["seq"], owner=self._gen)
        self.nodes[new_id] = child
        for grandchild_id in child.children:
            grandchild = self._node(grandchild_id)
            if grandchild is not None:
                grandchild.parent_id = new_id
        for p in child.blocks:
            self.block_node[p] = new_id
        for rid in child.lockers:
            self._lock(rid, new_id)
        node.blocks, node.token_ids, node.texts = node.blocks[:at], node.token_ids[:cut], node.texts[:cut]
        node.children = [new_id]
        node.mark, node.mark_seq = "split", ev["seq"]

    def _on_radix_evict(self, ev: dict) -> None:
        node_id = ev["node_id"]
        node = self.nodes.get(node_id)
        if node is None:
            return
        parent = self._node(node.parent_id)
        if parent is not None and node_id in parent.children:
            parent.children.remove(node_id)
        for child_id in node.children:  # should not happen (only leaves are evicted); keep them reachable
            child = self._node(child_id)
            if child is not None and parent is not None:
                child.parent_id = parent.node_id
                parent.children.append(child_id)
        del self.nodes[node_id]
        self.evicted_nodes.append((node_id, ev["t"], "".join(node.texts)[:40]))
        if len(self.evicted_nodes) > 32:
            del self.evicted_nodes[0]

    def _on_radix_hit(self, ev: dict) -> None:
        node = self._node(ev["node_id"])
        if node is None:
            return
        node.hits += 1
        node.last_access = ev["t"]
        node.mark, node.mark_seq = "hit", ev["seq"]
        self._lock(ev["request_id"], node.node_id)

    def _on_prefix_match(self, ev: dict) -> None:
        req = self._req(ev["request_id"])
        if req is not None:
            req.match = ev

    def _on_hit_rates(self, ev: dict) -> None:
        self.hit_rates = ev
        hist = self.history.hits
        if self.n_hits == len(hist):
            w = ev.get("window") or {}
            hist.append((ev["t"], ev["token_hit_rate"], ev["request_hit_rate"], ev["block_hit_rate"],
                         w.get("token_hit_rate"), w.get("request_hit_rate"), w.get("block_hit_rate"), ev["seq"]))
        self.n_hits += 1

    # --- edits
    def _on_edit(self, ev: dict) -> None:
        self.last_edit = ev
        req = self._req(ev["request_id"])
        if req is None:
            return
        m, kind = ev["position"], ev["kind"]
        new_ids, new_texts, n_del = list(ev["token_ids"]), list(ev["texts"]), ev["num_deleted"]
        if kind == "insert":
            n_del = 0
        end = m + n_del
        if m < req.prompt_len:
            # Inside the prompt: the prompt changes and the generated tokens are discarded.
            prompt_ids = req.token_ids[:req.prompt_len]
            prompt_texts = req.texts[:req.prompt_len]
            prompt_ids[m:min(end, req.prompt_len)] = new_ids
            prompt_texts[m:min(end, req.prompt_len)] = new_texts
            req.token_ids, req.texts = prompt_ids, prompt_texts
            req.prompt_len = len(prompt_ids)
        else:
            # Inside the generated part: the sequence up to and including the edit is the new context.
            req.token_ids[m:] = new_ids
            req.texts[m:] = new_texts
        req.num_output = max(0, len(req.token_ids) - req.prompt_len)
        req.last_token = None  # no inter-token latency across an edit
        req.status = RUNNING if req.status != FINISHED else WAITING
        req.marks.append((ev["t"], "edit", self.step))
        req.edits.append(ev)

    def _on_invalidate(self, ev: dict) -> None:
        self.last_invalidate = ev

    # --- window layers: restarts and attention-sink divergence (ring helper's events)
    def _on_ring_resume(self, ev: dict) -> None:
        req = self._req(ev["request_id"])
        if req is not None:
            req.ring_resume = ev

    def _on_sink_divergence(self, ev: dict) -> None:
        req = self._req(ev["request_id"])
        if req is not None:
            req.sink_divergence = ev

    # --- rings
    def _on_ring_write(self, ev: dict) -> None:
        key = (ev["request_id"], ev["group"])
        window, sinks = ev["window"], ev.get("sink_tokens") or 0
        ring = self.rings.get(key)
        if ring is None or ring.window != window or ring.sinks != sinks:
            ring = self.rings[key] = Ring(ev["request_id"], ev["group"], window, [-1] * (sinks + window),
                                          owner=self._gen, sinks=sinks)
        elif ring.owner != self._gen:
            ring = self.rings[key] = ring.copy()
            ring.owner = self._gen
        start, end = ev["start"], ev["end"]
        slots = ring.slots
        written = [p for p in range(start, min(end, sinks))] + list(range(max(start, sinks, end - window), end))
        for pos in written:
            slot = ring.slot_of(pos)
            if slots[slot] >= 0 and slots[slot] != pos:
                ring.overwrites += 1
            slots[slot] = pos
        ring.head = ring.slot_of(end) if end >= sinks else end
        ring.writes += end - start
        ring.last_written = list(range(start, end))
        ring.last_evicted = list(ev["evicted"])


_HANDLERS: dict[str, Callable[[CacheState, dict], None]] = {
    name[len("_on_"):]: fn for name, fn in vars(CacheState).items() if name.startswith("_on_")
}


def replay(header: dict, events, history: History | None = None) -> CacheState:
    """The state after all `events` (a straight replay, no keyframes)."""
    state = CacheState(header, history)
    state.apply_all(events)
    return state


def state_fingerprint(state: CacheState) -> dict[str, Any]:
    """The facts two runs must agree on (live vs replay, seek vs straight replay), as plain data."""
    return {
        "index": state.index,
        "seq": state.seq,
        "ref": list(state.ref),
        "kind": list(state.kind),
        "owners": [sorted(o) for o in state.owners],
        "hash": list(state.block_hash),
        "tables": {k: list(v) for k, v in sorted(state.tables.items())},
        "free": state.n_free,
        "n_cached": state.n_cached,
        "requests": {rid: (r.status, r.prompt_len, list(r.token_ids), list(r.texts), r.ttft, r.tpot,
                           r.match and r.match["reason"], len(r.marks))
                     for rid, r in sorted(state.requests.items())},
        "nodes": {nid: (n.parent_id, list(n.blocks), list(n.token_ids), sorted(n.children), n.hits,
                        sorted(n.lockers))
                  for nid, n in sorted(state.nodes.items())},
        "rings": {f"{k[0]}/{k[1]}": (list(r.slots), r.head, r.overwrites) for k, r in sorted(state.rings.items())},
        "steps": state.history_steps(),
        "hits": state.history_hits(),
        "n_itl": state.n_itl,
        "last_edit": state.last_edit and state.last_edit["seq"],
        "last_invalidate": state.last_invalidate and state.last_invalidate["seq"],
    }
