"""The miss explainer: what a prompt found in the prefix tree, and why matching stopped there.

Every admission emits a `prefix_match` event built from a `PrefixMatch`. Its reason names the one cause a user
can act on: `divergent` (a token differs: position and both tokens), `block_floor` (only whole blocks match),
`evicted` (when, by which policy), `salt` (another tenant holds it), `short_prompt`, `disabled`, `window`
(window layers could not restart there), `cache_end`, `full_match`, `empty_cache`.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from engine.core.tree_node import Node


class ExplainedTree(Protocol):
    """What the explainer reads of the prefix tree (engine/core/radix.py's RadixCache)."""

    block_size: int
    root: Node
    evicted: OrderedDict[str, tuple[int, float, str]]
    salts_of: dict[str, Counter]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix: tokens equal again after the first difference never count."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass
class PrefixMatch:
    """The longest cached whole-block prefix of a prompt, and why matching stopped (the miss explainer)."""

    # physical ids of the cached prefix, logical order
    blocks: list[int]
    # divergent | block_floor | evicted | salt | short_prompt | disabled | full_match |
    reason: str
    #              empty_cache | cache_end | window
    detail: dict
    prompt_tokens: int
    block_size: int
    cache_salt: str | None = None
    # the path (the last one may be covered only in part)
    nodes: list[Node] = field(default_factory=list)
    # keys of the matched blocks
    keys: list[str] = field(default_factory=list)
    # leading tokens of one more block reused too (a cached tail or tree block)
    partial_tokens: int = 0
    # blocks after `blocks` found in lower tiers (engine/core/tiers.py TierBlock), until admission loads them
    lower: list = field(default_factory=list)
    # with lower tiers on: the tier each block of `blocks` was found in ("device", "host", "disk")
    tiers: list[str] | None = None

    @property
    def num_tokens(self) -> int:
        return (len(self.blocks) + len(self.lower)) * self.block_size + self.partial_tokens

    @property
    def matchable_tokens(self) -> int:
        """Prompt tokens that could match: all but the last, which is always computed."""
        return max(self.prompt_tokens - 1, 0)

    @property
    def block_lookups(self) -> int:
        return self.matchable_tokens // self.block_size

    @classmethod
    def disabled(cls, prompt_tokens: int, block_size: int) -> PrefixMatch:
        """What the engine reports with the prefix cache off (no RadixCache exists)."""
        return cls([], "disabled", {}, prompt_tokens, block_size)

    def event_fields(self, request_id: str, text: Callable[[int], str] | None = None) -> dict:
        """Fields of the `prefix_match` event; `text` decodes the expected/actual token ids of a divergence."""
        detail = dict(self.detail)
        for side in ("expected", "actual"):
            token = detail.get(f"{side}_id")
            if token is not None:
                detail[f"{side}_text"] = text(token) if text else str(token)
        fields = {
            "request_id": request_id,
            "prompt_tokens": self.prompt_tokens,
            "matched_tokens": self.num_tokens,
            "reason": self.reason,
            "detail": detail,
        }
        if self.tiers is not None:
            fields["tiers"] = list(self.tiers)
        return fields


def explain(
    tree: ExplainedTree, token_ids, keys, contents, path, max_blocks, cache_salt, tails=()
) -> tuple[str, dict]:
    """Why matching stopped after `path` (the walk of `keys`): the reason and its detail. `tails`: cached partly
    filled blocks after the matched prefix, (parent node id, tokens), which count as continuations too."""
    bs = tree.block_size
    matched = sum(used for _, used in path)
    start = matched * bs
    nexts = continuations(tree, path, cache_salt) + list(tails)
    if matched == max_blocks:
        rest = list(token_ids[start : len(token_ids) - 1])
        if not rest:
            return "full_match", {}
        # a difference inside the partial block is a divergence, not the block floor
        stop = first_difference(start, matched, rest, nexts)
        if stop is not None:
            return stop
        return block_floor(start, bs, rest, nexts)
    evicted = tree.evicted.get(keys[matched])
    if evicted is not None:
        return evicted_reason(start, matched, keys[matched], evicted)
    others = [s for s in tree.salts_of.get(contents[matched], ()) if s != cache_salt]
    if others:
        return "salt", {"position": start, "block": matched, "other_salts": len(others)}
    # a full block with equal tokens would have had the same key: some token of this block differs from
    # every cached continuation, or the longest one (a tail) ends first
    stop = first_difference(start, matched, list(token_ids[start : start + bs]), nexts)
    if stop is not None:
        return stop
    if matched == 0 and not nexts:
        return "empty_cache", {}
    node_id = path[-1][0].node_id if path else tree.root.node_id
    return "cache_end", {"position": start, "node_id": node_id}


def block_floor(start: int, block_size: int, rest: list[int], nexts) -> tuple[str, dict]:
    """Every whole block matched; the `rest` of the prompt (a partly filled block) is not reused."""
    equal = max((common_prefix(rest, toks) for _, toks in nexts), default=0)
    return "block_floor", {
        "position": start,
        "block_size": block_size,
        "partial_tokens": len(rest),
        "equal_tokens": equal,
    }


def evicted_reason(start: int, block: int, key: str, gone: tuple[int, float, str]) -> tuple[str, dict]:
    """The next block was cached once: when it went ((seq, t) of its event) and by which policy."""
    seq, t, policy = gone
    return "evicted", {
        "position": start,
        "block": block,
        "hash": key,
        "evicted_seq": seq,
        "evicted_at": t,
        "policy": policy,
    }


def first_difference(start: int, block: int, mine: list[int], nexts) -> tuple[str, dict] | None:
    """The continuation sharing the most leading tokens with `mine`: `divergent` at its first different token,
    `cache_end` where it ends first; None when there is none or it equals all of `mine`."""
    if not nexts:
        return None
    same, node_id, theirs = max(
        ((common_prefix(mine, toks), nid, toks) for nid, toks in nexts), key=lambda c: c[0]
    )
    if same >= len(mine):
        return None
    if same >= len(theirs):
        return "cache_end", {"position": start + same, "node_id": node_id}
    return "divergent", {
        "position": start + same,
        "block": block,
        "node_id": node_id,
        "expected_id": theirs[same],
        "actual_id": mine[same],
    }


def continuations(tree: ExplainedTree, path, cache_salt) -> list[tuple[int, list[int]]]:
    """Token ids of each cached block that could follow the matched prefix: (node id, tokens)."""
    bs = tree.block_size
    if not path:
        nexts = [c for c in tree.root.children.values() if c.cache_salt == cache_salt]
    else:
        node, used = path[-1]
        if used < len(node.blocks):
            return [(node.node_id, node.token_ids[used * bs : (used + 1) * bs])]
        nexts = list(node.children.values())
    return [(c.node_id, c.token_ids[:bs]) for c in nexts]


def explain_below(tree, tiers, match, tokens, hashes, max_blocks: int) -> tuple[str, dict]:
    """Why a match that ran on past the device tree into lower tiers (engine/core/tiers.py's LowerTiers: the
    blocks held below a key) stopped where it did; a block dropped from the last tier is in `tree.evicted`."""
    bs = tree.block_size
    keys, contents = hashes[0], hashes[1]
    end = len(match.blocks) + len(match.lower)
    start = end * bs
    # the lower blocks hang below the device path's last node (the root when the device had none of them)
    node_id = match.nodes[-1].node_id if match.nodes else tree.root.node_id
    nexts = [(node_id, block.token_ids) for block in tiers.continuations(keys[end - 1])]
    if end == max_blocks:
        rest = list(tokens[start : len(tokens) - 1])
        return ("full_match", {}) if not rest else block_floor(start, bs, rest, nexts)
    gone = tree.evicted.get(keys[end])
    if gone is not None:
        return evicted_reason(start, end, keys[end], gone)
    others = [s for s in tree.salts_of.get(contents[end], ()) if s != match.cache_salt]
    if others:
        return "salt", {"position": start, "block": end, "other_salts": len(others)}
    stop = first_difference(start, end, list(tokens[start : start + bs]), nexts)
    return stop or ("cache_end", {"position": start, "node_id": node_id})
