"""The miss explainer: how many prompt tokens the prefix cache served, and why matching stopped.

It reads the request's `prefix_match` event and says it in words, with the prompt underneath, in the palette's
roles (kvtui/widgets/palette.py): `matched` (the cached role's colour) = served from the cache, `equal` (the
recompute role's) = equal to the cached tokens but recomputed anyway (matching works on whole blocks, and a
token equal again after the first difference is never a hit), `dropped` (error) = the first difference,
`token` shades = computed, `host` shades = served from the cache but loaded back from the host tier first.
Spaces in the compared tokens are shown as `␣` (chat-template jitter is often one space).
"""

from __future__ import annotations

from textual.content import Content

from kvtui.state import CacheState, RequestRecord
from kvtui.widgets.base import fmt_bytes, fmt_seconds, plural, show_text
from kvtui.widgets.palette import markup

REASONS = {
    "divergent": "the prompt differs from every cached continuation",
    "block_floor": "only whole blocks are matched, and the rest of the prompt does not fill one",
    "evicted": "the next block was cached once but has been evicted",
    "salt": "cached blocks exist only under another cache salt (tenant): never shared across salts",
    "short_prompt": "the prompt is shorter than one block: nothing to match",
    "disabled": "the prefix cache is off",
    "full_match": "every matchable token hit (the last prompt token is always computed)",
    "window": "a window layer no longer holds the window that ends at the match point",
    "empty_cache": "nothing was cached yet: a cold start",
    "cache_end": "the cache holds no continuation of this prefix: the rest of the prompt is new",
}
MATCHED = ("matched-a", "matched-b")
LOADED = ("host-a", "host-b")
EQUAL_RECOMPUTED = ("equal-a", "equal-b")
DIFFERENT = "dropped"
COMPUTED = ("token-a", "token-b")
SHOWN_KEYS = {
    "reused_partial",
    "position",
    "block",
    "node_id",
    "expected_text",
    "actual_text",
    "expected_id",
    "actual_id",
    "readmission",
    "evicted_at",
    "evicted_seq",
    "policy",
    "partial_tokens",
    "equal_tokens",
    "block_size",
    "other_salts",
    "hash",
    "not_loaded",
    "matched_blocks",
    "window_backoff",
    "limiting_group",
}


class _Parts:
    """Text built piece by piece with role names for styles, assembled into `Content` (a Rich Text's `append`)."""

    def __init__(self):
        self.parts: list = []

    def append(self, text: str, role: str = "") -> None:
        self.parts.append((text, markup(role)) if role else text)

    def content(self) -> Content:
        return Content.assemble(*self.parts)


def visible(text: str | None) -> str:
    return "∅" if text is None else repr(show_text(text).replace(" ", "␣"))[1:-1] or "∅"


def explain(state: CacheState | None, req: RequestRecord | None, misses=None) -> Content:
    """The request's match in words and its prompt; `misses` (kvtui/whatif/causes.py's RequestMisses of the
    request, from the trace's events) adds a cause for every missed prompt token."""
    if state is None or req is None:
        return Content.styled(
            "Select a request ([ and ]) to see how its prompt matched the prefix cache.", markup("dim")
        )
    match = req.match
    out = _Parts()
    out.append(f"{req.request_id}: ", role="bold")
    if match is None:
        out.append(
            "no prefix match yet (not scheduled, or the engine does not emit prefix_match)", role="dim"
        )
        return out.content()
    matched, total, reason = match["matched_tokens"], match["prompt_tokens"], match["reason"]
    detail = match.get("detail") or {}
    pct = 100 * matched / total if total else 0
    out.append(f"{matched} of {total} prompt tokens from the cache ({pct:.0f}%), {total - matched} computed")
    if detail.get("readmission"):
        out.append("  (re-admitted after an edit or preemption: not counted in the hit rates)", role="dim")
    out.append("\nstopped: ", role="bold")
    out.append(reason, role="warning")
    out.append(f" - {REASONS.get(reason, 'reason not known to this kvtui')}\n")
    _reason_detail(out, reason, detail, matched, state.block_size)
    if detail.get("limiting_group") is not None and state.kv_groups:
        _limiting_group(out, state, detail, matched)
    _tiers(out, state, req, detail)
    if detail.get("reused_partial"):
        out.append(
            f"the last {detail['reused_partial']} of them come from a partly used cached block (copied "
            "before this request writes into it)\n",
            role="cached",
        )
    if misses is not None:
        _causes(out, misses)
    extra = {k: v for k, v in detail.items() if k not in SHOWN_KEYS}
    if extra:
        out.append(", ".join(f"{k}={v}" for k, v in extra.items()) + "\n", role="dim")
    _prompt(out, req, matched, total, reason, detail, state.block_size)
    out.append(
        "\ngreen from cache"
        + (" · blue loaded from host" if match.get("tiers") and set(match["tiers"]) - {"device"} else "")
        + " · yellow equal but recomputed · red first difference · grey computed",
        role="dim",
    )
    return out.content()


def _tiers(out: _Parts, state: CacheState, req: RequestRecord, detail: dict) -> None:
    """How much of the match came from each tier below the device, and what could not be loaded."""
    tiers = req.match.get("tiers") or []
    loaded = req.loaded or {}
    for tier in dict.fromkeys(t for t in tiers if t != "device"):
        blocks, nbytes = loaded.get(tier, (tiers.count(tier), tiers.count(tier) * state.bytes_per_block))
        out.append(f"{tiers.count(tier) * state.block_size} tokens from {tier}", role="host")
        on_device = tiers.count("device") * state.block_size
        out.append(
            f" ({plural(blocks, 'block')} loaded back into the device, {fmt_bytes(nbytes)})"
            + (f", after {on_device} on the device" if on_device else "")
            + "\n"
        )
    if detail.get("not_loaded"):
        where = " and ".join(state.lower_tiers) or "a lower tier"
        out.append(
            f"{plural(detail['not_loaded'], 'more block')} matched in {where} but the device had no room to load "
            "them: recomputed\n",
            role="recompute",
        )


def _reason_detail(out: _Parts, reason: str, detail: dict, matched: int, block_size: int) -> None:
    pos = detail.get("position")
    if reason == "divergent" and pos is not None:
        where = (
            f" (block L{detail['block']}"
            + (f", tree node n{detail['node_id']})" if "node_id" in detail else ")")
            if "block" in detail
            else ""
        )
        out.append(f"first difference at position {pos}{where}: cached ")
        out.append(f"{visible(detail.get('expected_text'))}", role="cached")
        out.append(f" (id {detail.get('expected_id')}) vs prompt ")
        out.append(f"{visible(detail.get('actual_text'))}", role="evicted")
        out.append(f" (id {detail.get('actual_id')})\n")
        if pos > matched:
            out.append(
                f"positions {matched}-{pos - 1} equal the cache but share a block with the difference: "
                f"recomputed\n",
                role="recompute",
            )
    elif reason == "block_floor":
        partial, equal = detail.get("partial_tokens"), detail.get("equal_tokens")
        out.append(f"match ends at position {pos if pos is not None else matched}, a block boundary")
        if partial is not None:
            out.append(
                f"; the next {plural(partial, 'token')} fill only part of a {detail.get('block_size', block_size)}-"
                f"token block"
            )
            if equal is not None:
                out.append(f" ({equal} of them equal the cache)")
        out.append("\n")
    elif reason == "evicted":
        when = detail.get("evicted_at")
        out.append(
            f"block L{detail.get('block', '?')} was evicted at "
            f"{fmt_seconds(when) if isinstance(when, (int, float)) else '?'}"
            + (f" (event #{detail['evicted_seq']})" if "evicted_seq" in detail else "")
            + f" by the {detail.get('policy', '?')} policy"
            + (f"; hash {detail['hash']}" if "hash" in detail else "")
            + "\n"
        )
    elif reason == "salt":
        salts = detail.get("other_salts")
        out.append(f"this request's salt differs; the matching blocks belong to salt(s) {salts}\n")


def _limiting_group(out: _Parts, state: CacheState, detail: dict, matched: int) -> None:
    """window_layout="paged": the KV-cache group that cut the hit (vLLM's rule: the longest hit every group
    serves), beside what the prefix tree's group held."""
    group = detail["limiting_group"]
    spec = state.kv_groups[group]
    held = detail.get("matched_blocks")
    tree = state.group_label(state.table_group) if state.table_group is not None else "the table group"
    if held is not None:
        out.append(f"{tree} holds {plural(held * state.block_size, 'token')}; ")
    if spec.get("kind") == "sliding_window":
        window = spec.get("window")
        out.append(
            f"{state.group_label(group)} needs the blocks of the last {window} tokens before the hit point, "
            f"and past {matched} one of them is no longer cached (it left the window and was evicted): "
            f"the hit is {plural(matched, 'token')}\n"
        )
    else:
        out.append(f"{state.group_label(group)} serves only {plural(matched, 'token')}: the hit is that\n")


def _causes(out: _Parts, misses) -> None:
    """Every missed prompt token's cause (over the whole trace: a later preemption's recompute included)."""
    causes = misses.all_causes()
    missed = sum(causes.values())
    if not missed:
        return
    out.append("missed: ", role="bold")
    out.append(", ".join(f"{n} {cause.replace('_', ' ')}" for cause, n in causes.most_common()))
    detail = misses.detail
    if "evicted_at" in detail:
        out.append(
            f"; position {detail['position']} was evicted at {fmt_seconds(detail['evicted_at'])} by "
            f"{detail['policy']}"
        )
    if "diverged_at" in detail:
        out.append(
            f"; differs at {detail['diverged_at']} (cached id {detail.get('expected_id')}, prompt id "
            f"{detail.get('actual_id')})"
        )
    out.append(f" ({missed} of {misses.prompt_tokens} prompt tokens, whole trace)\n", role="dim")


def _prompt(
    out: _Parts, req: RequestRecord, matched: int, total: int, reason: str, detail: dict, block_size: int
) -> None:
    pos = detail.get("position")
    diff_at = pos if reason in ("divergent", "evicted") and pos is not None else None
    tiers = (req.match or {}).get("tiers") or []
    for i, text in enumerate(req.texts[:total]):
        if i < matched:
            lower = i // block_size < len(tiers) and tiers[i // block_size] != "device"
            style = (LOADED if lower else MATCHED)[i % 2]
        elif diff_at is not None and i < diff_at:
            style = EQUAL_RECOMPUTED[i % 2]
        elif diff_at is not None and i == diff_at:
            style = DIFFERENT
        else:
            style = COMPUTED[i % 2]
        out.append(show_text(text), role=style)
