"""What the fleet views show, as plain data: a `FleetView` built from a `FleetState`.

The fleet app draws only these. In a replay it builds them from its own `FleetState`; live, the collector
process (kvtui/sources/collector.py) folds the stream and sends them over a pipe, so the UI process never folds
100k events a second itself. Plain values (no widgets, no rich), small enough to pickle every frame: the table is
one dict per worker, the tree at most MAX_ROWS rows with their text already cut.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvtui.state.fleet import FleetState, HashNode
from kvtui.state.fleet_explain import node_salt
from kvtui.state.fleet_hybrid import explain_any
from kvtui.state.fleet_sources import SourceCounts
from kvtui.state.fleet_tiers import ordered
from kvtui.state.fleet_workers import Worker
from kvtui.state.server_figures import histogram_quantile, offload_facts, token_hit_rate

# tree rows built per rebuild (the first ones, depth first): a frame stays cheap
MAX_ROWS = 2_000
# characters of a row's tokens kept (wider than most terminals; a view is pickled each second)
ROW_TEXT = 240
# stream notes shown
NOTES = 12


@dataclass
class TreeRow:
    depth: int
    group: int
    # blocks in the chain this row stands for
    blocks: int
    # 16 hex digits
    first_hash: str
    # workers holding every block of the chain
    holders: tuple
    # the chain's tokens: text with a tokenizer, else ids (cut at ROW_TEXT)
    text: str
    orphan: bool = False
    # the salt of a root block (vLLM: from its extra keys), else None
    salt: str | None = None
    # the tiers each holder keeps the chain on ("GPU", "GPU+CPU", ...), in the order of `holders`
    tiers: tuple = ()


@dataclass
class FleetView:
    # events folded
    index: int
    # trace time of the last one
    t: float
    # (group, hash) blocks known, held or remembered
    nodes: int
    # distinct blocks held by at least one worker
    unique: int
    # worker_cells of each, in arrival order
    workers: list[dict] = field(default_factory=list)
    # gaps, restarts, malformed messages, newest last
    notes: list[str] = field(default_factory=list)
    # when asked for (the tree tab)
    tree: list[TreeRow] | None = None


def worker_cells(fleet: FleetState, worker: Worker) -> dict:
    """The facts of one fleet-table row, as plain values (tests read these; the view formats them)."""
    facts, before = fleet.facts(worker)
    stored, removed = worker.rates(fleet.now if fleet.now is not None else fleet.t)
    buckets = facts.get("ttft_buckets") or []
    counts = fleet.sources.get(worker.source) or SourceCounts()
    return {
        "worker": worker.worker,
        "rank": worker.rank,
        "resident": worker.resident,
        # blocks held per tier, fastest first (GPU included), and those removed from each
        "tiers": worker.held_tiers(),
        "removed_tiers": worker.removed_tiers(),
        "stored": worker.stored,
        "removed": worker.removed,
        "capacity": fleet.capacity(worker),
        "stored_per_s": stored,
        "removed_per_s": removed,
        "kv_usage": facts.get("kv_usage"),
        "hit_rate": token_hit_rate(facts, before),
        "ttft": [histogram_quantile(q, buckets) for q in (0.5, 0.95, 0.99)],
        "preemptions": facts.get("preemptions"),
        # the server's K/V precision (vLLM's cache_config_info), when its /metrics says
        "cache_dtype": facts.get("cache_dtype"),
        "gaps": counts.gaps,
        "lost": counts.lost,
        "restarts": counts.restarts,
        "malformed": counts.malformed,
        # batches lost since its last restart: its picture may miss blocks
        "unseen": counts.unseen,
        # why its server is taken as down (its /metrics stopped answering): the blocks shown are stale
        "down": counts.down,
        # what its /metrics says of the tiers below the GPU, when it exports offloading counters
        "offload": offload_facts(facts, before),
    }


def fleet_view(fleet: FleetState, *, tree: bool = False) -> FleetView:
    return FleetView(
        fleet.index,
        fleet.t,
        len(fleet.nodes),
        fleet.held_nodes,
        [worker_cells(fleet, w) for w in fleet.workers.values()],
        fleet.notes[-NOTES:],
        tree_rows(fleet) if tree else None,
    )


def _chain(fleet: FleetState, node: HashNode, seen: set) -> list[HashNode]:
    """The node and its only descendants while each has one child with the same holders (one radix row).
    `seen`: nodes already drawn (a publisher's hashes could chain in a cycle; a real engine's never do)."""
    chain, nodes = [node], fleet.nodes
    seen.add(id(node))
    while True:
        held = [k for k in fleet.children.get((node.group, node.hash), ()) if nodes[(node.group, k)].holders]
        # removed children (kept for the explainer) do not split a row
        if len(held) != 1:
            return chain
        child = nodes[(node.group, held[0])]
        # a row has one set of holders, each on one set of tiers
        if child.holders != node.holders or id(child) in seen:
            return chain
        seen.add(id(child))
        chain.append(child)
        node = child


def _chain_text(chain: list[HashNode]) -> str:
    if not chain[0].token_ids:
        return "(token ids not published: an offloading tier's store)"
    if chain[0].texts:
        text = ""
        for node in chain:
            text += "".join(node.texts or ())
            if len(text) >= ROW_TEXT:
                break
        return text[:ROW_TEXT]
    parts, size = [], 0
    for node in chain:
        parts.append(" ".join(map(str, node.token_ids)))
        size += len(parts[-1]) + 3
        if size >= ROW_TEXT:
            break
    return " | ".join(parts)[:ROW_TEXT]


def tree_rows(fleet: FleetState, limit: int = MAX_ROWS) -> list[TreeRow]:
    """The visible rows, depth first (held blocks only; removed ones are kept for the explainer)."""
    rows: list[TreeRow] = []
    groups = sorted({g for worker in fleet.workers.values() for g in worker.held_by_group})
    roots = [(g, fleet.nodes[(g, h)], False) for g in groups for h in fleet.children.get((g, None), ())]
    roots += [(key[0], fleet.nodes[key], True) for key in fleet.orphans if key in fleet.nodes]
    stack = [(0, g, n, orphan) for g, n, orphan in reversed(roots)]
    seen: set = set()
    while stack and len(rows) < limit:
        depth, group, node, orphan = stack.pop()
        if not node.holders or id(node) in seen:
            continue
        chain = _chain(fleet, node, seen)
        rows.append(
            TreeRow(
                depth,
                group,
                len(chain),
                f"{node.hash:016x}",
                tuple(sorted(node.holders)),
                _chain_text(chain),
                orphan,
                node_salt(node) if depth == 0 else None,
                tuple("+".join(ordered(node.holders[w])) for w in sorted(node.holders)),
            )
        )
        last = chain[-1]
        kids = [
            fleet.nodes[(group, h)]
            for h in fleet.children.get((group, last.hash), ())
            if (group, h) in fleet.nodes
        ]
        stack.extend((depth + 1, group, k, False) for k in reversed(kids))
    return rows


def explain_text(fleet: FleetState | None, ids: list[int], options: dict) -> str:
    """The explain tab: a prompt's token ids against every worker, best match first."""
    if fleet is None:
        return "no events yet"
    # a hybrid model's groups (the stored blocks name them): vLLM's hybrid rule (fleet_hybrid.py)
    results = explain_any(fleet, ids, **options)
    lines = [
        f"{len(ids)} prompt tokens against {len(results)} workers (matched by the token ids each stored "
        "block carries; hashes are never recomputed):",
        "",
    ]
    lines += [r["message"] for r in sorted(results, key=lambda r: -r["matched_tokens"])]
    return "\n".join(lines)


def explain_summary(results: list[dict]) -> str:
    """One line for the proxy and the CLI: the best worker's predicted hit tokens, and any caveat."""
    if not results:
        return "no worker attached"
    best = max(results, key=lambda r: r["matched_tokens"])
    caveat = " (history incomplete)" if best.get("caveat") else ""
    return f"{best['matched_tokens']}/{best['prompt_tokens']} tokens predicted cached on {best['worker']}{caveat}"
