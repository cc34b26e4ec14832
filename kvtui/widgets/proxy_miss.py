"""The miss explainer for one request `kvtui proxy` saw: its prompt, what vLLM served from its cache, what kvtui
predicted at its arrival (a disagreement flagged), and why the rest missed, in the words of the explain tab.

The explanation is the one the proxy made at the request's arrival against the attached tree
(kvtui/state/fleet_explain.py: the best worker's message and reason), not a new one against the cache as it is
now. Two bars draw the prompt, one cell per few tokens: kvtui's predicted hit over vLLM's cached tokens, `█` in
the palette's `cached` role, the rest `░` in `free`.
"""

from __future__ import annotations

from textual.content import Content

from kvtui.state.proxy_requests import ProxyRequest
from kvtui.widgets.base import fmt_seconds
from kvtui.widgets.palette import markup

# the attached explainer's reasons (kvtui/state/fleet_explain.py) in words
REASONS = {
    "full_match": "every full block of the prompt is cached (vLLM still computes the prompt's last token)",
    "block_floor": "the rest is shorter than a block: engines cache whole blocks only",
    "divergent": "a cached block starts like the prompt's but differs",
    "removed": "the worker held exactly the next block and removed it (evicted)",
    "elsewhere": "this worker lacks the next block but another holds it (a router could send the prompt there)",
    "lora": "the next block is cached for another LoRA adapter",
    "salt": "the next block is cached under another cache salt: never shared across salts",
    "extra_keys": "the cached block was hashed with extra keys (multimodal ids, salt, LoRA) the prompt lacks",
    "group": "these tokens are cached in another KV-cache group",
    "cache_end": "the cache holds nothing below the matched prefix: the rest of the prompt is new",
    "empty": "the worker holds no block",
}
BAR = 40


def _bar(hit: int | None, total: int) -> list:
    if hit is None or total <= 0:
        return [("?" * BAR, markup("dim"))]
    cells = round(BAR * min(hit, total) / total)
    # the rest in a glyph of its own: the two bars read apart without colour (and where `free` renders bright)
    return [("█" * cells, markup("cached")), ("░" * (BAR - cells), markup("free"))]


def _disagreement(req: ProxyRequest) -> str:
    """What a disagreement can mean, by its direction."""
    more = req.cached_tokens - req.predicted_cached
    if more > 0:
        return (
            f"vLLM served {more} tokens more than kvtui predicted: it held blocks this view did not know of "
            "(history lost at a late join or in a gap, events not yet arrived)"
        )
    return (
        f"kvtui predicted {-more} tokens vLLM did not serve: blocks this view showed as cached were gone or "
        "not usable for this request (a removal not seen, another salt or adapter)"
    )


def request_detail(req: ProxyRequest | None, t0: float = 0.0) -> Content:
    """The selected request in words (kvtui/widgets/miss.py's layout: the figures, then `stopped:` and why)."""
    if req is None:
        return Content.styled(
            "Select a request (up / down, [ and ]) to see how its prompt hit.", markup("dim")
        )
    parts: list = [
        (f"{req.request_id} ", markup("bold")),
        f"{req.endpoint or '?'}  arrived +{req.arrival - t0:.2f}s",
    ]
    if req.status is not None:
        parts.append(f"  status {req.status}")
    if req.cache_salt is not None:
        parts.append(f"  salt {req.cache_salt!r}")
    cached = "?" if req.cached_tokens is None else str(req.cached_tokens)
    predicted = "-" if req.predicted_cached is None else str(req.predicted_cached)
    parts += [
        f"\nprompt {req.prompt_tokens} tokens · vLLM cached {cached} · kvtui predicted {predicted}",
    ]
    if req.disagrees:
        parts += [
            "  ",
            ("DISAGREES: kvtui's picture of vLLM's cache is wrong or incomplete", markup("warning")),
        ]
    parts += ["\nkvtui ", *_bar(req.predicted_cached, req.prompt_tokens)]
    parts += ["\nvLLM  ", *_bar(req.cached_tokens, req.prompt_tokens), "\n"]
    ttft = fmt_seconds(req.ttft)
    tpot = fmt_seconds(req.tpot)
    streamed = "" if req.stream else " (not streamed: TTFT is the whole answer)"
    parts.append(f"TTFT {ttft} · TPOT {tpot} · {req.output_tokens} output tokens{streamed}\n")
    if req.admitted_after is not None:
        at = "-" if req.predicted_at_admission is None else str(req.predicted_at_admission)
        parts.append(
            f"admitted in vLLM's step that ended {fmt_seconds(req.admitted_after)} after its arrival (queued "
            f"at most that long); kvtui predicted {at} cached at its admission\n"
        )
    if req.disagrees:
        parts.append((_disagreement(req) + "\n", markup("recompute")))
    if req.cached_tokens is None:
        parts.append(
            (
                "vLLM reported no cached tokens: start it with --enable-prompt-tokens-details (a stream reports "
                "usage only with stream_options.include_usage)\n",
                markup("dim"),
            )
        )
    parts += _why(req)
    return Content.assemble(*parts)


def _why(req: ProxyRequest) -> list:
    if req.explain is None:
        return [
            (
                "no explanation: run kvtui proxy with --attach to explain each request at its arrival",
                markup("dim"),
            )
        ]
    out: list = []
    if req.reason is not None:
        words = REASONS.get(req.reason, "reason not known to this kvtui")
        out += [("stopped: ", markup("bold")), (req.reason, markup("warning")), f" - {words}\n"]
    out.append(req.explain)
    if req.caveat and "caveat" not in req.explain:
        out.append((f"\ncaveat: {req.caveat}", markup("warning")))
    return out
