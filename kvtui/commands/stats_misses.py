"""`kvtui stats`'s lines on the prompt tokens: hit + missed = every lookup's prompt tokens, the misses by cause
(kvtui/whatif/causes.py's `PromptTally`, the one source of these shares), and the requests that missed most."""

from __future__ import annotations

from kvtui.whatif.causes import MissLedger, PromptTally, shares_sentence


def tally_line(tally: PromptTally) -> str:
    """ "177 prompt tokens over 3 lookups: 116 hit (65.5%) + 61 missed (34.5%)" (each share to one decimal)."""
    return (
        f"{tally.prompt_tokens:,} prompt tokens over {tally.lookups:,} lookups: {tally.hit_tokens:,} hit "
        f"({100 * tally.hit_share:.1f}%) + {tally.missed_tokens:,} missed ({100 * tally.missed_share:.1f}%)"
    )


def misses_json(ledger: MissLedger) -> dict:
    """Per workload and per request (`kvtui stats --json`): {prompt_tokens, hit_tokens, missed_tokens, lookups,
    causes, shares, requests: [{request_id, prompt_tokens, hit_tokens, misses, detail}]}; hit + causes =
    prompt tokens."""
    tally = ledger.tally()
    return {
        "prompt_tokens": tally.prompt_tokens,
        "hit_tokens": tally.hit_tokens,
        "missed_tokens": tally.missed_tokens,
        "lookups": tally.lookups,
        "causes": dict(tally.missed.most_common()),
        "shares": shares_sentence(tally.prompt_tokens, tally.missed),
        "requests": [record.as_dict() for record in ledger.requests.values()],
    }


def misses_text(ledger: MissLedger, worst: int = 5) -> str:
    """The tally, the shares per workload, then the requests that missed most."""
    tally = ledger.tally()
    lines = [
        "",
        "prompt    " + tally_line(tally) + _token_hit_words(tally),
        "misses    " + shares_sentence(tally.prompt_tokens, tally.missed),
    ]
    if "capacity" not in tally.missed and ledger.evicted:
        lines.append("          (no miss was of an evicted block)")
    records = sorted(ledger.requests.values(), key=lambda r: r.prompt_tokens - r.hit_tokens, reverse=True)
    for record in records[:worst]:
        missed = record.prompt_tokens - record.hit_tokens
        if not missed:
            break
        parts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in record.all_causes().most_common())
        lookups = f" over {record.lookups} lookups" if record.lookups > 1 else ""
        lines.append(
            f"  {record.request_id}: {record.hit_tokens}/{record.prompt_tokens} hit{lookups}; missed {parts}"
            + _detail_words(record.detail)
        )
    lines.append(
        "causes: compulsory (never seen), capacity (evicted), block floor (short of a whole block), "
        "salt, divergence, in flight (another request had not computed it yet), preemption "
        "(recomputed), last token (always computed); per request: --json"
    )
    return "\n".join(lines)


def _token_hit_words(tally: PromptTally) -> str:
    """How the table's tok hit relates: it counts what each lookup served (a preempted request's recomputed
    tokens too) over the tokens that could match (all but each lookup's last)."""
    served = tally.hit_tokens + tally.missed["preemption"]
    return (
        f"; tok hit above: {served:,} served of the {tally.prompt_tokens - tally.lookups:,} that could match"
    )


def _detail_words(detail: dict) -> str:
    words = []
    if "evicted_at" in detail:
        words.append(
            f"evicted at {detail['evicted_at']:.3f} s by {detail['policy']} (position {detail['position']})"
        )
    if "diverged_at" in detail:
        words.append(
            f"differs at {detail['diverged_at']} (cached id {detail.get('expected_id')}, prompt id "
            f"{detail.get('actual_id')})"
        )
    return "; " + "; ".join(words) if words else ""
