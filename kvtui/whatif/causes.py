"""A cause for every missed prompt token, per request and per workload; the causes add up exactly to the misses.

Prompt tokens are counted per prefix lookup: a request's first admission, and each edit's new prompt (a
preemption's readmission is not a new lookup). A prompt token is a hit when the request never computed it: the
cache served it at the lookup and, if the request was preempted, again at every readmission. Everything else is
a miss with one cause, so hit + missed = every lookup's prompt tokens (`PromptTally`):

    compulsory   its block (this prefix, this salt) was never seen before
    capacity     its block was cached and evicted (at t, by policy P: the manager's block_evicted events)
    block_floor  shared with a cached prompt, but short of a whole block (and not reused as a partial block)
    salt         the same tokens are cached under another cache salt (tenant or LoRA isolation)
    divergence   the prompt differs from a cached one inside a block at position p (both token ids kept),
                 or the block's own tokens were seen before after another prefix (a difference earlier on)
    in_flight    another running request announced this block but had not computed it yet (a simulation knows)
    preemption   served at first admission, recomputed after a preemption (its blocks went meanwhile)
    last_token   the last prompt token is always computed (its logits pick the first output token)
    disabled     prefix caching is off
    too_large    prompt + output exceed the whole pool: the request was not run (the engine refuses it)

The classification starts from the engine's `prefix_match` event (reason and detail: where matching stopped
and why) and then walks the request's remaining blocks with what the run has seen: keys ever put in the tree
(`radix_insert`), keys evicted (`block_evicted`: when, which policy), keys announced by admitted requests, and
the salt-free content of each block with the salts that announced it, and a hash of each block's own tokens.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

CAUSES = (
    "compulsory",
    "capacity",
    "block_floor",
    "salt",
    "divergence",
    "in_flight",
    "preemption",
    "last_token",
    "disabled",
    "too_large",
)


@dataclass(frozen=True)
class PromptTally:
    """Every prompt token of every lookup, hit or missed for one cause: hit_tokens + sum(missed) ==
    prompt_tokens. The one source of the prompt-token hit and miss shares (`kvtui stats`, its --json, the
    what-if report, the app's views)."""

    prompt_tokens: int
    hit_tokens: int
    missed: Counter
    lookups: int

    @property
    def missed_tokens(self) -> int:
        return self.prompt_tokens - self.hit_tokens

    def share(self, tokens: int) -> float:
        """`tokens` as a share of all prompt tokens (0.0 with none)."""
        return tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def hit_share(self) -> float:
        return self.share(self.hit_tokens)

    @property
    def missed_share(self) -> float:
        return self.share(self.missed_tokens)


@dataclass
class RequestMisses:
    request_id: str
    # over every lookup of the request (its admission and each edit's)
    prompt_tokens: int
    # tokens the latest lookup served
    first_matched: int = 0
    # the latest lookup's smallest readmission match (None: not preempted since)
    min_rematched: int | None = None
    causes: Counter = field(default_factory=Counter)
    # the first capacity eviction, the divergence
    detail: dict = field(default_factory=dict)
    lookups: int = 1
    # hit tokens of the lookups before the latest
    earlier_hits: int = 0

    @property
    def recomputed(self) -> int:
        if self.min_rematched is None:
            return 0
        return max(0, self.first_matched - self.min_rematched)

    @property
    def hit_tokens(self) -> int:
        return self.earlier_hits + self.first_matched - self.recomputed

    def next_lookup(self, prompt_tokens: int, matched: int) -> None:
        """An edit's lookup: what the earlier ones hit and recomputed is settled, the new prompt counted."""
        self.causes = self.all_causes()
        self.earlier_hits = self.hit_tokens
        self.prompt_tokens += prompt_tokens
        self.first_matched, self.min_rematched = matched, None
        self.lookups += 1

    def all_causes(self) -> Counter:
        causes = Counter(self.causes)
        if self.recomputed:
            causes["preemption"] += self.recomputed
        return causes

    def as_dict(self) -> dict:
        return {
            "request_id": self.request_id,
            "prompt_tokens": self.prompt_tokens,
            "hit_tokens": self.hit_tokens,
            "misses": dict(self.all_causes()),
            "detail": self.detail,
        }


class MissLedger:
    """What a run has seen of the cache, and the misses of every request."""

    def __init__(self, block_size: int):
        self.block_size = block_size
        self.ever_cached: set = set()
        # key -> (t, policy) of its last eviction
        self.evicted: dict = {}
        self.announced: set = set()
        # salt-free content -> the first salt that announced it
        self.content_salts: dict = {}
        # hash of each announced block's own tokens (no prefix)
        self.block_tokens: set = set()
        self.requests: dict[str, RequestMisses] = {}

    # --- events -----------------------------------------------------------------------------------------
    def on_insert(self, keys) -> None:
        self.ever_cached.update(keys)

    def on_evict(self, key, t: float, policy: str) -> None:
        # an evicted block was cached (a trace may lack radix_insert's optional hashes)
        self.ever_cached.add(key)
        self.evicted[key] = (t, policy)

    def on_event(self, event: dict, prompt_of) -> None:
        """Fold in one of the manager's events, as a simulation emits it or a trace recorded it.
        `prompt_of(request_id)` gives (prompt token ids, cache salt, block keys, salt-free block contents)."""
        kind = event["type"]
        if kind == "radix_insert":
            self.on_insert(event.get("hashes") or ())
        elif kind == "block_evicted":
            self.on_evict(event["hash"], event["t"], event["policy"])
        elif kind == "prefix_match":
            rid = event["request_id"]
            tokens, salt, keys, contents = prompt_of(rid)
            self.on_match(
                rid,
                len(tokens),
                event["matched_tokens"],
                event["reason"],
                event["detail"] or {},
                keys,
                contents,
                salt,
                tokens,
            )

    def too_large(self, request_id: str, prompt_tokens: int) -> None:
        self.requests[request_id] = RequestMisses(
            request_id, prompt_tokens, causes=Counter(too_large=prompt_tokens)
        )

    def on_match(
        self,
        request_id: str,
        prompt_tokens: int,
        matched: int,
        reason: str,
        detail: dict,
        keys: list,
        contents: list,
        salt,
        tokens,
    ) -> None:
        """A prefix_match: a lookup (the first admission, an edit) classifies the misses of its prompt, a
        readmission's records what came back."""
        if detail.get("readmission"):
            record = self.requests[request_id]
            if record.min_rematched is None or matched < record.min_rematched:
                record.min_rematched = matched
            return
        record = self.requests.get(request_id)
        if record is None:
            record = self.requests[request_id] = RequestMisses(request_id, prompt_tokens, matched)
        else:
            record.next_lookup(prompt_tokens, matched)
        self._classify(record, prompt_tokens, matched, reason, detail, keys, contents, salt, tokens)
        bs = self.block_size
        matchable = max(prompt_tokens - 1, 0) // bs
        self.announced.update(keys[:matchable])
        self.block_tokens.update(hash(tuple(tokens[j * bs : (j + 1) * bs])) for j in range(matchable))
        for content in contents[:matchable]:
            self.content_salts.setdefault(content, salt)

    # --- classification ---------------------------------------------------------------------------------
    def _classify(
        self,
        record: RequestMisses,
        n: int,
        matched: int,
        reason: str,
        detail: dict,
        keys,
        contents,
        salt,
        tokens,
    ) -> None:
        """The misses of one lookup of an `n`-token prompt."""
        bs = self.block_size
        causes = record.causes
        if n == 0:
            return
        causes["last_token"] += 1
        end = n - 1
        if reason == "disabled":
            if end > matched:
                causes["disabled"] += end - matched
            return
        whole = end // bs
        first = matched // bs
        pos = matched
        cause = None
        for j in range(first, min(whole, len(keys))):
            stop = (j + 1) * bs
            key = keys[j]
            if key in self.ever_cached:
                cause = "capacity"
                if "evicted_at" not in record.detail and key in self.evicted:
                    t, policy = self.evicted[key]
                    record.detail.update(evicted_at=t, policy=policy, position=j * bs)
            elif key in self.announced:
                cause = "in_flight"
            elif contents[j] in self.content_salts and self.content_salts[contents[j]] != salt:
                cause = "salt"
            elif j == first and reason == "divergent" and int(detail.get("position", j * bs)) > j * bs:
                # the block shares its first tokens with a cached one and then differs
                at = min(max(int(detail["position"]), pos), stop)
                if at > pos:
                    causes["block_floor"] += at - pos
                    pos = at
                record.detail.update(
                    diverged_at=at, expected_id=detail.get("expected_id"), actual_id=detail.get("actual_id")
                )
                cause = "divergence"
            elif hash(tuple(tokens[j * bs : stop])) in self.block_tokens:
                # these very tokens were seen before, after another prefix: the prompt differs earlier
                cause = "divergence"
                if "diverged_at" not in record.detail and reason == "divergent":
                    record.detail.update(
                        diverged_at=int(detail.get("position", first * bs)),
                        expected_id=detail.get("expected_id"),
                        actual_id=detail.get("actual_id"),
                    )
            else:
                cause = "compulsory"
            causes[cause] += stop - pos
            pos = stop
        if end > pos:
            # the partial block before the last token
            if cause is None:
                shared = int(detail.get("equal_tokens", 0)) if reason == "block_floor" else 0
                floor = max(0, min(whole * bs + shared, end) - pos)
                if floor:
                    causes["block_floor"] += floor
                    pos += floor
                cause = "compulsory"
            if end > pos:
                causes[cause] += end - pos

    # --- totals -----------------------------------------------------------------------------------------
    def tally(self) -> PromptTally:
        """Every lookup's prompt tokens over every request, hit or missed by cause."""
        prompt = hits = lookups = 0
        causes: Counter = Counter()
        for record in self.requests.values():
            prompt += record.prompt_tokens
            hits += record.hit_tokens
            lookups += record.lookups
            causes.update(record.all_causes())
        return PromptTally(prompt, hits, causes, lookups)

    def totals(self) -> tuple[int, int, Counter]:
        """(prompt tokens, hit tokens, misses by cause): `tally` as a tuple."""
        tally = self.tally()
        return tally.prompt_tokens, tally.hit_tokens, tally.missed


def _share(x: float) -> str:
    """A share of the prompt tokens: one decimal, or two under 0.1% (0.02% in flight, not 0.0%)."""
    return f"{100 * x:.2f}%" if 0 < x < 0.001 else f"{100 * x:.1f}%"


def shares_sentence(prompt_tokens: int, causes: Counter) -> str:
    """ "of the 62.6% of prompt tokens missed: 31.0% compulsory, 27.4% capacity, ..." (shares of all prompt
    tokens, largest first)."""
    missed = sum(causes.values())
    if not prompt_tokens:
        return "no prompt tokens"
    parts = [f"{_share(v / prompt_tokens)} {k.replace('_', ' ')}" for k, v in causes.most_common() if v]
    return f"of the {100 * missed / prompt_tokens:.1f}% of prompt tokens missed: " + ", ".join(parts)


def ledger_from_trace(header: dict, events: list[dict]) -> MissLedger | None:
    """The misses of a recorded trace (kvtui's engine, or a what-if run's -o) by the same ledger, fed from the
    file: block keys are the engine's chained hashes of each lookup's prompt (engine/core/hashing.py). None
    when the trace has no prefix_match events (an attach trace: the engine's matching was not recorded).

    Every lookup is classified: the first admission and each edit's (its prompt rebuilt by
    kvtui/whatif/trace_prompts.py); a readmission after a preemption counts what it had to compute again, as
    in a simulation."""
    from engine.core.hashing import block_hashes
    from kvtui.whatif.trace_prompts import TracePrompts

    bs = int(header.get("block_size") or 16)
    ledger = MissLedger(bs)
    prompts = TracePrompts()
    preempted: set[str] = set()
    seen_match = False
    for event in events:
        kind = event["type"]
        if kind in ("request_arrived", "token_emitted", "edit"):
            prompts.on_event(event)
        elif kind == "request_preempted":
            preempted.add(event["request_id"])
        elif kind == "prefix_match":
            seen_match = True
            rid = event["request_id"]
            if rid not in prompts:
                continue
            detail = event["detail"] or {}
            if detail.get("readmission"):
                if rid not in preempted or rid not in ledger.requests:
                    continue
                preempted.discard(rid)
                ledger.on_match(rid, 0, event["matched_tokens"], event["reason"], detail, [], [], None, [])
                continue
            preempted.discard(rid)
            tokens, salt = prompts.lookup_tokens(rid, event["prompt_tokens"]), prompts.salts[rid]
            matchable = max(len(tokens) - 1, 0) // bs
            keys, contents = block_hashes(tokens[: matchable * bs], bs, salt)
            ledger.on_match(
                rid,
                len(tokens),
                event["matched_tokens"],
                event["reason"],
                detail,
                keys,
                contents,
                salt,
                tokens,
            )
        elif kind in ("radix_insert", "block_evicted"):
            ledger.on_event(event, None)
    return ledger if seen_match else None


def prompt_tally(header: dict, events: list[dict]) -> PromptTally | None:
    """The prompt-token hit and miss shares of a trace up to its last event (None without prefix_match events):
    what `kvtui stats` prints and every view that shows these shares calls."""
    ledger = ledger_from_trace(header, events)
    return None if ledger is None else ledger.tally()
