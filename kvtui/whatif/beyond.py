"""What a simulated run hits that the whole-prompt-block models cannot: the one-pass LRU curve (curve.py) and
Belady's bound (optimal.py) count a hit only on a whole block that an earlier request's prompt held. The
engine also serves

    partly filled blocks   the first tokens of a cached block (a tail, or a block that diverges later)
    generated tokens       a whole block that no earlier prompt held: its tokens were generated (the next turn
                           of a chat finds the previous answer cached)

so a simulation may score above the optimal figure by up to these two shares. Both are counted at each
request's first lookup from the run itself: the partly filled ones from the match's `reused_partial`, the
generated ones by looking each matched whole block up among the full prompt blocks of the requests looked up
before. Token workloads only: a hash-id workload never caches its generated tokens.
"""

from __future__ import annotations

from engine.core.hashing import extend_block_hashes

# what the whole-prompt-block figures are called wherever they are shown
ONE_PASS_LABEL = "one-pass LRU (whole prompt blocks)"
OPTIMAL_LABEL = "optimal (whole prompt blocks)"


class GeneratedHits:
    """Tokens of first lookups served from whole blocks that no earlier prompt held."""

    def __init__(self, block_size: int):
        self.block_size = block_size
        # the full prompt blocks of every request looked up so far (what the one-pass model has seen)
        self.prompt_blocks: set = set()
        self.tokens = 0

    def on_first_lookup(self, req, matched_tokens: int, reused_partial: int) -> None:
        """`req`: the engine Request at its first lookup (its chain holds its matchable prompt blocks)."""
        bs = self.block_size
        prompt = req.prompt_token_ids
        keys = req.block_keys
        full = len(prompt) // bs
        if len(keys) < full:
            # the last full block holds the last prompt token: never matched, but a prompt block all the same
            keys, contents = list(keys), list(req.block_contents)
            extend_block_hashes(prompt, bs, full, keys, contents, req.cache_salt)
        whole = (matched_tokens - reused_partial) // bs
        self.tokens += bs * sum(1 for key in keys[:whole] if key not in self.prompt_blocks)
        self.prompt_blocks.update(keys[:full])


def beyond_line(point: dict, prompt_tokens: int) -> str | None:
    """Why the simulated point may score above the whole-prompt-block figures, in points of prompt tokens;
    None for a point that is not simulated, or that does not carry both counts."""
    counted = "reused_partial_tokens" in point and "generated_hit_tokens" in point
    if point.get("method") != "simulated" or not prompt_tokens or not counted:
        return None
    partial = 100 * point.get("reused_partial_tokens", 0) / prompt_tokens
    generated = 100 * point.get("generated_hit_tokens", 0) / prompt_tokens
    return (
        f"simulated may score up to {partial + generated:.1f} points above the whole-prompt-block figures: "
        f"partly filled blocks {partial:.1f}, generated tokens {generated:.1f}"
    )
