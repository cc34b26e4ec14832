"""`FleetState`: the reducer of attach events (engine/trace/attach_events.py) into what the fleet views draw.

Separate from `CacheState` on purpose: an attached vLLM / SGLang engine publishes a hash space, not physical
blocks. What it has: which worker holds which block (keyed by worker, group and hash), the chain of hashes
(parent_block_hash), the token ids of every stored block, and, from /metrics, KV usage, hit rate, TTFT and
preemptions. What it lacks and we do not invent: physical block ids, ref counts, locks, block tables and
requests (`LACKS` says so in the views). Each worker's counts are kvtui/state/fleet_workers.py; each source's
health (gaps, restarts, a server down) and /metrics facts kvtui/state/fleet_sources.py.

Blocks are tree nodes keyed by (group, hash): replicas that compute the same hash for the same prefix (vLLM's
default SHA-256 and SGLang's hashes are stable across processes) share a node, so a prefix duplicated across
replicas is one node held by several workers. A node remembers when each worker removed it, so the miss
explainer can say "removed at t". Nodes no worker holds are forgotten oldest first past `GONE_MEMORY`.

Times: an event's `t` is when its message arrived; what happened when (a block's first store, its removal, the
stored/removed rates) is the publisher's own batch timestamp (`engine_ts`, wall-clock seconds) against the trace's
anchor (the header's `wall_clock`: the wall-clock time of t=0), so a replayed batch is placed when it happened,
before the attach if it was (a negative time). A publisher whose timestamps are not wall-clock falls back to `t`.

Hashes are u64 ints here (the trace writes them as 16 hex digits). Live, block events arrive as structs in runs
(`apply_all`, one run per message); from a trace, as dicts one by one: both fold through the same code, and a
test holds the two states equal.
"""

from __future__ import annotations

from collections import OrderedDict

import msgspec

from engine.trace.attach_structs import KvBlockRemoved, KvBlockStored
from kvtui.state.fleet_sources import FleetSources, SourceCounts
from kvtui.state.fleet_tiers import GPU, tier_name
from kvtui.state.fleet_workers import Worker

# removed nodes remembered for the miss explainer
GONE_MEMORY = 200_000
HAS = (
    "blocks by hash per worker",
    "the prefix chain (parent hashes)",
    "token ids of stored blocks",
    "KV usage, token hit rate, TTFT, preemptions (from /metrics)",
)
LACKS = ("physical block ids", "ref counts", "locks", "block tables", "requests")


class HashNode(msgspec.Struct, gc=False):
    """One block of one (group, hash): a node of an attached fleet's hash tree (not our own radix tree's
    `RadixNode`, kvtui/state/tree.py, nor the engine's). A msgspec struct, not a dataclass: built in C (a third
    of the time) and not tracked by the garbage collector (it never takes part in a cycle), which matters at
    100k blocks/s."""

    group: int
    # u64
    hash: int
    parent: int | None
    # the event's own list when it stored one block (never mutated), else a slice of it
    token_ids: list
    lora: str | None = None
    salt: str | None = None
    extra: object = None
    texts: list | None = None
    # first stored
    t: float = 0.0
    # worker -> frozenset of the tiers holding it (kvtui/state/fleet_tiers.py; a fresh dict per node)
    holders: dict = {}
    # worker -> (t, tier) of its last removal, the one that left it on no tier (made at the first removal)
    removed: dict | None = None
    # (worker, tier) -> physical copies beyond the first (vLLM may cache one hash in two blocks, and its
    # offloading connector announce one hash once per chunk; made when it does)
    copies: dict | None = None


class FleetState(FleetSources):
    def __init__(self, header: dict | None = None):
        self.header = header or {}
        self.workers: dict[str, Worker] = {}
        self.sources: dict[str, SourceCounts] = {}
        self.nodes: dict[tuple, HashNode] = {}
        # (group, parent hash or None) -> {child hash: None}, in order
        self.children: dict[tuple, dict] = {}
        # (source, rank label) -> latest facts
        self.metrics: dict[tuple, dict] = {}
        # the reading before (for rates over the interval), and the first one (for the whole trace)
        self.metrics_before: dict[tuple, dict] = {}
        self.metrics_first: dict[tuple, dict] = {}
        # nodes no worker holds, oldest first
        self.gone: OrderedDict = OrderedDict()
        # nodes whose parent block was never seen (or was forgotten)
        self.orphans: dict[tuple, None] = {}
        # nodes at least one worker holds
        self.held_nodes = 0
        # KV-cache group -> (kind, sliding window) as the stored blocks name them (a hybrid model's groups)
        self.group_specs: dict[int, tuple] = {}
        self.index = 0
        self.t = 0.0
        # live: the clock of the stream (rates decay when events stop)
        self.now: float | None = None
        # gaps, restarts and malformed messages, newest last (bounded)
        self.notes: list[str] = []
        # the wall-clock time of t=0 (attach traces record it): engine timestamps become trace times
        self.wall_clock: float | None = self.header.get("wall_clock")

    def when(self, e) -> float:
        """When an event happened on the trace's clock: its publisher's timestamp against the anchor, else when
        it arrived."""
        ts = e.engine_ts
        anchor = self.wall_clock
        # a wall-clock timestamp, not in the future beyond a little clock skew
        if anchor and ts > 1e9 and ts - anchor <= e.t + 5:
            return round(ts - anchor, 6)
        return e.t

    # ------------------------------------------------------------------ folding events
    def apply(self, event: dict) -> None:
        self.apply_all((event,))

    def apply_all(self, events) -> None:
        """Fold events in order. Stored and removed blocks, nearly every event of an attach stream, arrive as
        structs (engine/trace/attach_structs.py; a trace's dicts are made into them) and are folded right here,
        their lookups hoisted out of the loop: live attach folds 100k a second. Other types go to their `_on_`
        handler."""
        nodes, children, orphans, gone, workers = (
            self.nodes,
            self.children,
            self.orphans,
            self.gone,
            self.workers,
        )
        wid = worker = bucket = None
        last_t = None
        folded = 0
        for e in events:
            folded += 1
            cls = type(e)
            if cls is dict:
                etype = e["type"]
                if etype == "kv_block_stored" or etype == "kv_block_removed":
                    cls = KvBlockStored if etype == "kv_block_stored" else KvBlockRemoved
                    try:
                        e = cls.from_dict(e)
                    # a hand-made trace: not 16 hex digits
                    except (ValueError, TypeError, AttributeError):
                        self.t = e["t"]
                        self._note(f"event {e['seq']}: a block hash that is not 16 hex digits; event skipped")
                        continue
                else:
                    handler = _HANDLERS.get(etype)
                    self.t = e["t"]
                    if handler is not None:
                        # a handler reads a consistent state
                        self.index += folded - 1
                        folded = 1
                        handler(self, e)
                        # a handler may have made or changed workers
                        wid = None
                    continue
            self.t = e.t
            t = self.when(e)
            if e.worker != wid:
                wid = e.worker
                worker = workers.get(wid) or self._worker(wid)
                last_t = None
            # blocks stored / removed per second of trace time (a message's events share t)
            if t != last_t:
                last_t = t
                bucket = worker.buckets.get(int(t)) or worker.bucket(t)
            group, hashes = e.group or 0, e.hashes
            medium, owner = e.medium, e.ownership
            gpu = (medium is None or medium == GPU) and owner is None
            medium = GPU if gpu else tier_name(medium, owner)
            n = len(hashes)
            if cls is KvBlockRemoved:
                for h in hashes:
                    self._drop(worker, (group, h), medium, t)
                worker.removed += n
                if not gpu:
                    worker.tier(medium)[2] += n
                bucket[1] += n
                continue
            if e.spec_kind is not None and group not in self.group_specs:
                self.group_specs[group] = (e.spec_kind, e.sliding_window)
            size, tokens, parent, texts, extra = e.block_size, e.token_ids, e.parent, e.texts, e.extra_keys
            only = _only(medium)
            held = resident = 0
            # a chain from the root that this worker holds whole: a re-report of blocks it hit (vLLM's
            # kv_cache_report_mode=full, never removed as such), not new physical copies
            rereport = parent is None and all(
                (node := nodes.get((group, h))) is not None and medium in node.holders.get(wid, ())
                for h in hashes
            )
            if rereport:
                worker.rereported += n
            for i, h in enumerate(hashes):
                key = (group, h)
                node = nodes.get(key)
                if node is None:
                    # SGLang stores one block per event: no slicing (the event's list is never changed)
                    if not tokens:
                        # an offloading tier's store without token ids: held, placed nowhere in the tree
                        node = HashNode(group, h, None, tokens, t=t)
                    elif n == 1:
                        node = HashNode(
                            group, h, parent, tokens, e.lora, e.salt, extra[0] if extra else None, texts, t
                        )
                    else:
                        lo, hi = i * size, (i + 1) * size
                        node = HashNode(
                            group,
                            h,
                            parent,
                            tokens[lo:hi],
                            e.lora,
                            e.salt,
                            extra[i] if extra and i < len(extra) else None,
                            texts[lo:hi] if texts else None,
                            t,
                        )
                    nodes[key] = node
                    self.held_nodes += 1
                    node.holders[wid] = only
                    if not tokens:
                        orphans[key] = None
                    else:
                        up = (group, parent)
                        kids = children.get(up)
                        if kids is None:
                            children[up] = {h: None}
                        else:
                            kids[h] = None
                        if parent is not None and up not in nodes:
                            orphans[key] = None
                    held += 1
                    resident += 1
                else:
                    if tokens and not node.token_ids:
                        # stored first without token ids (an offloading tier's): now placed in the tree
                        self._place(node, e, i, parent)
                    holders = node.holders
                    media = holders.get(wid)
                    if media is None:
                        if not holders:
                            gone.pop(key, None)
                            self.held_nodes += 1
                        holders[wid] = only
                        held += 1
                        resident += 1
                    elif medium not in media:
                        # another tier (offloaded to CPU, say): media are frozensets
                        holders[wid] = media | only
                        resident += 1
                    elif not rereport:
                        # the same hash in a second physical block of this tier (removed by a BlockRemoved of
                        # its own)
                        copies = node.copies
                        if copies is None:
                            copies = node.copies = {}
                        copy = (wid, medium)
                        copies[copy] = copies.get(copy, 0) + 1
                        worker.copies += 1
                parent = h
            worker.stored += n
            if tokens:
                worker.block_size = size
            if gpu:
                worker.resident += resident
            else:
                counts = worker.tier(medium)
                counts[0] += resident
                counts[1] += n
            if held:
                worker.held += held
                worker.held_by_group[group] = worker.held_by_group.get(group, 0) + held
            bucket[0] += n
        self.index += folded

    def _worker(self, wid: str) -> Worker:
        worker = self.workers.get(wid)
        # an event before its attach_worker (a hand-written trace): still counted
        if worker is None:
            worker = self.workers[wid] = Worker(wid, "", wid)
        return worker

    def _on_attach_worker(self, e: dict) -> None:
        worker = self._worker(e["worker"])
        worker.source, worker.name, worker.rank, worker.blocks = (
            e["source"],
            e["name"],
            e.get("rank"),
            e.get("blocks"),
        )
        self._source(e["source"])

    def _on_kv_all_cleared(self, e: dict) -> None:
        worker = self._worker(e["worker"])
        t, wid = e["t"], worker.worker
        # rare (a reset or a restart): a scan of the nodes instead of a per-worker index
        if worker.held:
            for key, node in list(self.nodes.items()):
                if node.copies:
                    for copy in [c for c in node.copies if c[0] == wid]:
                        del node.copies[copy]
                for medium in node.holders.get(wid, ()):
                    self._drop(worker, key, medium, t)
        worker.copies = 0
        worker.cleared += 1
        if e["cause"] == "restart":
            self._note(f"{worker.worker}: publisher restarted, its cache starts empty")

    def _drop(self, worker: Worker, key: tuple, medium: str, t: float) -> None:
        node = self.nodes.get(key)
        media = node.holders.get(worker.worker) if node is not None else None
        if media is None or medium not in media:
            # a removal of a block we never saw stored (joined late, or lost in a gap)
            return
        copies = node.copies
        if copies and copies.get((worker.worker, medium)):
            # one of its physical copies on this tier went; the hash stays cached there
            copies[(worker.worker, medium)] -= 1
            worker.copies -= 1
            return
        if medium == GPU:
            worker.resident -= 1
        else:
            worker.lower[medium][0] -= 1
        if len(media) > 1:
            node.holders[worker.worker] = media - _only(medium)
            return
        del node.holders[worker.worker]
        if node.removed is None:
            node.removed = {worker.worker: (t, medium)}
        else:
            node.removed[worker.worker] = (t, medium)
        worker.held -= 1
        worker.held_by_group[key[0]] -= 1
        if not node.holders:
            self.held_nodes -= 1
            self.gone[key] = None
            if len(self.gone) > GONE_MEMORY:
                self._forget(self.gone.popitem(last=False)[0])

    def _place(self, node: HashNode, e: KvBlockStored, i: int, parent: int | None) -> None:
        """A node stored first without token ids, now stored with them (the event's i-th block, below
        `parent`): it takes the block's tokens and identity and moves to its place in the tree."""
        size, group = e.block_size, node.group
        one = len(e.hashes) == 1
        node.token_ids = e.token_ids if one else e.token_ids[i * size : (i + 1) * size]
        node.parent, node.lora, node.salt = parent, e.lora, e.salt
        extra, texts = e.extra_keys, e.texts
        node.extra = (extra[0] if one else extra[i]) if extra and i < len(extra) else None
        node.texts = (texts if one else texts[i * size : (i + 1) * size]) if texts else None
        self.orphans.pop((group, node.hash), None)
        up = (group, parent)
        self.children.setdefault(up, {})[node.hash] = None
        if parent is not None and up not in self.nodes:
            self.orphans[(group, node.hash)] = None

    def _forget(self, key: tuple) -> None:
        node = self.nodes.pop(key)
        self.orphans.pop(key, None)
        siblings = self.children.get((node.group, node.parent))
        if siblings is not None:
            siblings.pop(node.hash, None)
        # their parent is gone from memory: they hang loose
        for child in self.children.pop(key, ()):
            self.orphans[(node.group, child)] = None

    # ------------------------------------------------------------------ reading
    def holders_of(self, key: tuple) -> list[str]:
        """Workers holding block (group, hash); the hash as a u64 int or as the trace's 16 hex digits."""
        group, h = key
        node = self.nodes.get((group, int(h, 16) if isinstance(h, str) else h))
        return sorted(node.holders) if node is not None else []


# medium -> frozenset({medium}), shared by every holder on that one medium
_ONLY: dict[str, frozenset] = {}


def _only(medium: str) -> frozenset:
    media = _ONLY.get(medium)
    if media is None:
        media = _ONLY[medium] = frozenset((medium,))
    return media


# event type -> handler, FleetSources' too
_HANDLERS = {
    name[len("_on_") :]: getattr(FleetState, name) for name in dir(FleetState) if name.startswith("_on_")
}


def replay_fleet(header: dict, events) -> FleetState:
    state = FleetState(header)
    state.apply_all(events)
    return state
