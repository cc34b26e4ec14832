"""The requests `kvtui proxy` saw, as the attach app's requests tab draws them (plain data, no widgets).

A proxy log line (kvtui/sources/proxy.py) becomes a `ProxyRequest`: its times (arrival, first token, last
token: TTFT and decode as two phases), its prompt, what vLLM said it served from its cache (`cached_tokens`)
and what kvtui's view of the cache predicted at its arrival (`predicted_cached`, with `--attach`), and why the
rest missed (the explainer's message and reason). `ProxyRequests` holds the most recent `LAST` of them, taken
in batches as the log grows, and orders them by arrival.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine.trace.metrics import summary

# requests kept: the tab shows the most recent ones
LAST = 500


@dataclass(frozen=True)
class ProxyRequest:
    request_id: str
    # position in the whole log (its lane's colour stays the same as older requests drop out)
    ordinal: int
    # wall-clock seconds
    arrival: float
    endpoint: str = ""
    status: int | str | None = None
    stream: bool = False
    cache_salt: str | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    # vLLM's usage.prompt_tokens_details.cached_tokens (None: the server did not report it)
    cached_tokens: int | None = None
    # what kvtui's attached view predicted at the arrival (None: the proxy ran without --attach)
    predicted_cached: int | None = None
    ttft: float | None = None
    tpot: float | None = None
    # with --attach: the engine's time of the step that admitted it (when that step ended), and what the cache
    # held for it then (kvtui/sources/proxy_admission.py)
    admitted: float | None = None
    predicted_at_admission: int | None = None
    # the explainer at the arrival: the best worker's message, its reason word, and any caveat
    explain: str | None = None
    reason: str | None = None
    caveat: str | None = None

    @property
    def first_token(self) -> float | None:
        return None if self.ttft is None else self.arrival + self.ttft

    @property
    def last_token(self) -> float | None:
        """The first token plus TPOT for every later one (the first token's time without a TPOT)."""
        first = self.first_token
        if first is None or self.tpot is None or self.output_tokens < 2:
            return first
        return first + self.tpot * (self.output_tokens - 1)

    @property
    def admitted_after(self) -> float | None:
        """Seconds from its arrival to the end of the step that admitted it (vLLM publishes a step's stores
        when it ends, so its queueing was at most this, and its prefill began within it); None: not known."""
        return None if self.admitted is None else max(0.0, self.admitted - self.arrival)

    @property
    def disagrees(self) -> bool:
        """kvtui predicted a different number of cached tokens than vLLM served."""
        return (
            self.predicted_cached is not None
            and self.cached_tokens is not None
            and self.predicted_cached != self.cached_tokens
        )


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def proxy_request(record: dict, ordinal: int, arrival: float = 0.0) -> ProxyRequest:
    """One log line as a request; `arrival` stands in for a line without one (the one before it)."""
    output = record.get("output_token_ids")
    return ProxyRequest(
        request_id=str(record.get("request_id") or f"line-{ordinal + 1}"),
        ordinal=ordinal,
        arrival=_number(record.get("arrival")) or arrival,
        endpoint=str(record.get("endpoint") or ""),
        status=record.get("status"),
        stream=bool(record.get("stream")),
        cache_salt=record.get("cache_salt"),
        prompt_tokens=len(record.get("prompt_token_ids") or []) or _count(record.get("prompt_tokens")) or 0,
        # the answer's ids, else vLLM's usage count (ids can be missing: a failed /tokenize of the text)
        output_tokens=(len(output) if isinstance(output, list) else 0)
        or _count(record.get("completion_tokens"))
        or 0,
        cached_tokens=_count(record.get("cached_tokens")),
        predicted_cached=_count(record.get("predicted_cached")),
        admitted=_number(record.get("admitted")),
        predicted_at_admission=_count(record.get("predicted_at_admission")),
        ttft=_number(record.get("ttft")),
        tpot=_number(record.get("tpot")),
        explain=record.get("explain"),
        reason=record.get("explain_reason"),
        caveat=record.get("caveat"),
    )


class ProxyRequests:
    """The most recent `last` requests of a proxy log, in arrival order, fed as the log grows."""

    def __init__(self, last: int = LAST):
        self.last = last
        # in log order (the order requests finished), the oldest dropped first
        self._kept: list[ProxyRequest] = []
        self._seen = 0
        self.order: list[str] = []
        self.by_id: dict[str, ProxyRequest] = {}
        # the axis: the earliest arrival shown, and seconds from it to the latest last token
        self.t0 = 0.0
        self.span = 0.0

    def __len__(self) -> int:
        return len(self.order)

    def extend(self, records: list) -> int:
        """Take new log lines (any that is not a JSON object is skipped); returns how many were taken."""
        taken = 0
        arrival = self._kept[-1].arrival if self._kept else 0.0
        ids = {r.request_id for r in self._kept}
        for record in records:
            if not isinstance(record, dict):
                continue
            req = proxy_request(record, self._seen, arrival)
            if req.request_id in ids:
                # a restarted proxy appends to the same log and counts from proxy-1 again
                req = replace(req, request_id=f"{req.request_id}#{self._seen + 1}")
            ids.add(req.request_id)
            arrival = req.arrival
            self._kept.append(req)
            self._seen += 1
            taken += 1
        if taken:
            del self._kept[: -self.last]
            self._arrange()
        return taken

    def _arrange(self) -> None:
        ordered = sorted(self._kept, key=lambda r: r.arrival)
        self.by_id = {r.request_id: r for r in ordered}
        self.order = list(self.by_id)
        self.t0 = ordered[0].arrival
        ends = (r.last_token if r.last_token is not None else r.arrival for r in ordered)
        self.span = max(ends) - self.t0

    def requests(self) -> list[ProxyRequest]:
        return [self.by_id[rid] for rid in self.order]

    def latencies(self) -> dict[str, dict]:
        """TTFT and TPOT summaries (n, p50, p95, p99) over the requests held, as engine/trace/metrics.py
        defines them."""
        reqs = self.requests()
        return {
            "ttft": summary([r.ttft for r in reqs if r.ttft is not None]),
            "tpot": summary([r.tpot for r in reqs if r.tpot is not None]),
        }

    def disagreements(self) -> int:
        return sum(r.disagrees for r in self.by_id.values())

    def pick(self, selected: str | None) -> str | None:
        """The request to show: the one selected while it is held, else the latest arrival."""
        if selected in self.by_id:
            return selected
        return self.order[-1] if self.order else None
