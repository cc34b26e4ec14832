"""The miss explainer: how many prompt tokens the prefix cache served, and why matching stopped."""

from __future__ import annotations

from rich.text import Text

from kvtui.state import CacheState, Request
from kvtui.widgets.base import show_text

REASONS = {
    "divergent": "the prompt differs from every cached continuation",
    "block_floor": "matching works on whole blocks: the rest of the prompt ends inside a block",
    "evicted": "the next block was cached once but has been evicted",
    "salt": "a different cache salt (tenant): blocks are never shared across salts",
    "short_prompt": "the prompt is shorter than one block",
    "disabled": "the prefix cache is off",
    "full_match": "every matchable token hit (the last prompt token is always computed)",
    "window": "a window layer no longer holds the window that ends at the match point",
    "empty_cache": "nothing was cached yet",
}


def explain(state: CacheState | None, req: Request | None) -> Text:
    if state is None or req is None:
        return Text("Select a request to see how its prompt matched the prefix cache.", style="dim")
    match = req.match
    out = Text()
    out.append(f"{req.request_id}: ", style="bold")
    if match is None:
        out.append("no prefix match yet (not scheduled, or the engine does not emit prefix_match)", style="dim")
        return out
    matched, total, reason = match["matched_tokens"], match["prompt_tokens"], match["reason"]
    pct = 100 * matched / total if total else 0
    out.append(f"{matched} of {total} prompt tokens from cache ({pct:.0f}%)\n")
    out.append("stopped: ", style="bold")
    out.append(f"{reason}", style="bold yellow")
    out.append(f" - {REASONS.get(reason, '')}\n")
    detail = match.get("detail") or {}
    pos = detail.get("position")
    if reason == "divergent" and pos is not None:
        exp, act = detail.get("expected_text"), detail.get("actual_text")
        out.append(f"first difference at position {pos}: ")
        if exp is not None:
            out.append(f"cached {show_text(exp)!r} (id {detail.get('expected_id')})", style="green")
            out.append(" vs ")
        out.append(f"prompt {show_text(str(act))!r} (id {detail.get('actual_id')})", style="red")
        out.append("\n")
    elif reason == "evicted":
        out.append(f"evicted at t={detail.get('evicted_at', '?')} by {detail.get('policy', '?')}\n")
    extra = {k: v for k, v in detail.items()
             if k not in ("position", "expected_text", "actual_text", "expected_id", "actual_id")}
    if extra and reason not in ("divergent",):
        out.append(", ".join(f"{k}={v}" for k, v in extra.items()) + "\n", style="dim")
    # the prompt with its matched part highlighted and the first divergent token marked
    for i, text in enumerate(req.texts[:total]):
        if i < matched:
            style = "black on #59b26a" if i % 2 else "black on #4a9a5a"
        elif pos is not None and i == pos and reason in ("divergent", "evicted"):
            style = "bold white on #b03a48"
        else:
            style = "on #333344" if i % 2 else "on #2a2a36"
        out.append(show_text(text), style=style)
    out.append("\nA token equal again after the first difference is never a hit.", style="dim")
    return out
