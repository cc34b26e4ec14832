"""The requests reducer: each request's sequence (prompt + generated, every token with its text), its
lifecycle and timings, the prefix match that explains its misses, and the edits made to it.

Requests are copied on write: a snapshot shares them, and `_req` copies one the first time this state
mutates it (see `CacheState.snapshot`).
"""

from __future__ import annotations

import copy as _copy
from dataclasses import dataclass, field

# A request's lifecycle as the timeline draws it.
WAITING, RUNNING, PREEMPTED, FINISHED = "waiting", "running", "preempted", "finished"
# KL divergence (nats) from the exact cache: below 1e-3, up to 1e-2, up to 1e-1, above (the token strip's
# kl-0 .. kl-3 colours)
KL_BINS = (1e-3, 1e-2, 1e-1)


@dataclass(slots=True)
class RequestRecord:
    """What the trace says of one request: its sequence (prompt + generated, each token with its text) and what
    happened to it. The viewer's record, rebuilt from events; the engine's own is engine/core/request.py's
    `Request`."""

    request_id: str
    # arrival order, 0-based: stable colors and lane order
    ordinal: int
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
    # the prompt tokens of the lookup cached_tokens counts: an edit's lookup holds more than the first prompt
    cached_of: int = 0
    reason: str | None = None
    ttft: float | None = None
    tpot: float | None = None
    num_output: int = 0
    # per position: True where an edit put the token (typed text), not the model: "generated" leaves them out
    typed: list[bool] = field(default_factory=list)
    # the prefix_match event: the miss explainer
    match: dict | None = None
    # lower tier -> [blocks, bytes] its latest admission loaded back into the device (None: nothing loaded)
    loaded: dict[str, list[int]] | None = None
    # Timeline marks: (t, kind, step) with kind in arrived/scheduled/prefill/decode/edit/preempted/finished.
    marks: list[tuple[float, str, int]] = field(default_factory=list)
    edits: list[dict] = field(default_factory=list)
    # radix nodes this request holds a lock ref on
    locked: list[int] = field(default_factory=list)
    # the last ring_resume event (window layers restarting after an edit/hit)
    ring_resume: dict | None = None
    # attention sinks vs full attention, when the run used sinks
    sink_divergence: dict | None = None
    # per position: KL divergence of its next-token distribution from the exact cache's (kv_divergence events;
    # None where none was measured), and the K/V precision measured
    kl: list[float | None] | None = None
    kl_dtype: str | None = None
    owner: int = 0

    @property
    def status_text(self) -> str:
        """The status as the views say it: a finished request with its reason; an aborted one as aborted."""
        if self.status != FINISHED or not self.reason:
            return self.status
        return "aborted" if self.reason == "aborted" else f"finished ({self.reason})"

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_typed(self) -> int:
        """Tokens after the prompt that an edit typed in (a new turn inserted at the end), not sampled."""
        return sum(self.typed[self.prompt_len : len(self.token_ids)])

    @property
    def num_generated(self) -> int:
        """Tokens after the prompt that the model sampled."""
        return self.num_output - self.num_typed

    def copy(self) -> RequestRecord:
        new = _copy.copy(self)
        new.token_ids = list(self.token_ids)
        new.texts = list(self.texts)
        new.typed = list(self.typed)
        new.marks = list(self.marks)
        new.edits = list(self.edits)
        new.locked = list(self.locked)
        if self.kl is not None:
            new.kl = list(self.kl)
        return new

    def kl_bin(self, position: int) -> int | None:
        """Which of KL_BINS the position's divergence falls in (None: not measured)."""
        value = self.kl[position] if self.kl is not None and position < len(self.kl) else None
        if value is None:
            return None
        return sum(value >= edge for edge in KL_BINS)


class RequestsReducer:
    """The requests part of `CacheState`: arrival to finish, emitted tokens, prefix matches and edits."""

    def _init_requests(self) -> None:
        self.requests: dict[str, RequestRecord] = {}
        # request ids by arrival
        self.order: list[str] = []
        self.last_edit: dict | None = None
        self.last_invalidate: dict | None = None

    def _snapshot_requests(self, new) -> None:
        new.requests = dict(self.requests)
        new.order = list(self.order)

    def _req(self, rid: str) -> RequestRecord | None:
        """The request, owned by this state (copied first if a snapshot shares it)."""
        req = self.requests.get(rid)
        if req is not None and req.owner != self._gen:
            req = self.requests[rid] = req.copy()
            req.owner = self._gen
        return req

    # ------------------------------------------------------------------ lifecycle and scheduling
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
        if parent is not None and parent.token_ids[: len(ids)] == ids:
            # A fork carries only the prompt, but shares the parent's whole sequence so far (its next token
            # is emitted at the parent's next position).
            ids, texts = list(parent.token_ids), list(parent.texts)
        # a fork's copied sequence keeps which of its tokens were typed
        typed = ((parent.typed if parent is not None else []) + [False] * len(ids))[: len(ids)]
        self.requests[rid] = RequestRecord(
            rid,
            ordinal,
            prompt_len,
            ids,
            texts,
            max_tokens=ev.get("max_tokens", 0),
            cache_salt=ev.get("cache_salt"),
            parent_id=ev.get("parent_id"),
            arrived=ev["t"],
            marks=[(ev["t"], "arrived", self.step)],
            owner=self._gen,
            # a fork inherits what its parent got
            cached_tokens=parent.cached_tokens if parent is not None else 0,
            cached_of=parent.cached_of if parent is not None else 0,
            typed=typed,
        )

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
            req.num_computed = 0
            req.marks.append((ev["t"], "preempted", self.step))

    def _on_prefill_chunk(self, ev: dict) -> None:
        rid, step = ev["request_id"], ev["step"]
        req = self._req(rid)
        if req is not None:
            req.status = RUNNING
            req.num_computed = ev["end"]
            req.marks.append((ev["t"], "prefill", step))
        bs = self.block_size
        self._mark_writing(rid, step, ev["start"] // bs, max(ev["start"], ev["end"] - 1) // bs)

    def _on_decode(self, ev: dict) -> None:
        rid, step = ev["request_id"], ev["step"]
        req = self._req(rid)
        if req is not None:
            req.status = RUNNING
            req.num_computed = ev["position"] + 1
            req.marks.append((ev["t"], "decode", step))
        logical = ev["position"] // self.block_size
        self._mark_writing(rid, step, logical, logical)

    def _on_kv_divergence(self, ev: dict) -> None:
        req = self._req(ev["request_id"])
        if req is None:
            return
        start, values = ev["start"], ev["kl"]
        kl = req.kl if req.kl is not None else []
        if len(kl) < start + len(values):
            kl.extend([None] * (start + len(values) - len(kl)))
        kl[start : start + len(values)] = values
        req.kl, req.kl_dtype = kl, ev["kv_dtype"]

    def _on_token_emitted(self, ev: dict) -> None:
        req = self._req(ev["request_id"])
        if req is None:
            return
        t, position = ev["t"], ev["position"]
        # The emitted position is authoritative: anything at or after it is an older continuation.
        if position < len(req.token_ids):
            del req.token_ids[position:]
            del req.texts[position:]
            del req.typed[position:]
        # tokens this trace never showed: keep positions aligned
        elif position > len(req.token_ids):
            gap = position - len(req.token_ids)
            req.token_ids.extend([-1] * gap)
            req.texts.extend(["�"] * gap)
        req.typed.extend([False] * (len(req.token_ids) - len(req.typed)))
        req.token_ids.append(ev["token_id"])
        req.texts.append(ev["text"])
        req.typed.append(False)
        req.num_output = len(req.token_ids) - req.prompt_len
        if req.first_token is None:
            req.first_token = t
            req.ttft = t - req.arrived
        if req.last_token is not None:
            self._record_itl(t, t - req.last_token)
        req.last_token = t

    def _on_request_finished(self, ev: dict) -> None:
        rid = ev["request_id"]
        req = self._req(rid)
        if req is not None:
            req.status = FINISHED
            req.num_computed = 0
            req.finished = ev["t"]
            req.reason = ev["reason"]
            req.cached_tokens = ev["cached_tokens"]
            # the engine's count is its latest lookup's (an edit's, which older traces marked a readmission)
            if req.match is not None and req.match["matched_tokens"] == req.cached_tokens:
                req.cached_of = req.match["prompt_tokens"]
            if ev.get("ttft") is not None:
                req.ttft = ev["ttft"]
            req.tpot = ev.get("tpot")
            req.marks.append((ev["t"], "finished", self.step))

    def _on_prefix_match(self, ev: dict) -> None:
        req = self._req(ev["request_id"])
        if req is not None:
            req.match = ev
            req.loaded = self.take_loads(ev["request_id"])
            # the cached prefix is valid K/V from the start
            req.num_computed = ev["matched_tokens"]
            if not (ev.get("detail") or {}).get("readmission"):
                # what the cache served at the first lookup
                req.cached_tokens = ev["matched_tokens"]
                req.cached_of = ev["prompt_tokens"]

    # ------------------------------------------------------------------ edits
    def _on_edit(self, ev: dict) -> None:
        self.last_edit = ev
        req = self._req(ev["request_id"])
        if req is None:
            return
        m, kind = ev["position"], ev["kind"]
        new_ids, new_texts, n_del = list(ev["token_ids"]), list(ev["texts"]), ev["num_deleted"]
        if kind == "insert":
            n_del = 0
        # the same rule as engine/core/edits.py apply_edit
        ids = req.token_ids[:m] + new_ids + req.token_ids[m + n_del :]
        texts = req.texts[:m] + new_texts + req.texts[m + n_del :]
        typed = req.typed[:m] + [True] * len(new_ids) + req.typed[m + n_del :]
        in_prompt = m < req.prompt_len or req.num_tokens == req.prompt_len
        # in the prompt (or nothing generated yet): the prompt changes, generated tokens go
        if in_prompt:
            keep = max(m + len(new_ids), req.prompt_len + len(new_ids) - n_del)
        # in the generated part: the sequence up to and including the edit is the new context
        else:
            keep = m + len(new_ids)
        req.token_ids, req.texts, req.typed = ids[:keep], texts[:keep], typed[:keep]
        if in_prompt:
            req.prompt_len = keep
        req.num_output = max(0, len(req.token_ids) - req.prompt_len)
        # no inter-token latency across an edit
        req.last_token = None
        req.marks.append((ev["t"], "edit", self.step))
        req.edits.append(ev)

    def _on_invalidate(self, ev: dict) -> None:
        self.last_invalidate = ev
        req = self._req(ev["request_id"])
        if req is None:
            return
        status = ev.get("status")
        # traces from before the field: a running request kept running, others queued
        if status is None:
            status = RUNNING if req.status == RUNNING else WAITING
        req.status = status
        req.num_computed = ev["first_recomputed"]
        req.cached_tokens = min(req.cached_tokens, ev["first_recomputed"])
