"""The metrics reducer: engine steps, hit rates and inter-token latencies as time series, and the counters the
views show (evictions, preemptions).

The series live in a `History` that is append-only and shared by every state of one trace: a state records
only how many rows it has seen (`n_steps`, `n_hits`, `n_itl`), so copying a state never copies the history, and
a state that re-applies events it has already seen (seeking back, then forward) appends nothing.
"""

from __future__ import annotations


class History:
    """Append-only metrics samples of one trace; states index into it by length (see module docstring)."""

    def __init__(self) -> None:
        # One row per `step` event: (t, step, used, cached, free, num_tokens, duration, seq).
        self.steps: list[tuple] = []
        # One row per `hit_rates` event: (t, token, request, block, w_token, w_request, w_block, seq).
        self.hits: list[tuple] = []
        # Inter-token latencies in emission order: (t, seconds).
        self.itl: list[tuple[float, float]] = []


class MetricsReducer:
    """The metrics part of `CacheState`: step and hit_rates events, inter-token latencies, counters."""

    def _init_metrics(self, history: History | None) -> None:
        self.history = history if history is not None else History()
        # the last hit_rates event
        self.hit_rates: dict | None = None
        # history.steps rows this state has seen
        self.n_steps = 0
        self.n_hits = 0
        self.n_itl = 0
        self.evictions = 0
        self.preemptions = 0

    # ------------------------------------------------------------------ derived views
    def history_steps(self) -> list[tuple]:
        return self.history.steps[: self.n_steps]

    def history_hits(self) -> list[tuple]:
        return self.history.hits[: self.n_hits]

    def itl_values(self, last: int | None = None) -> list[float]:
        lo = 0 if last is None else max(0, self.n_itl - last)
        return [gap for _, gap in self.history.itl[lo : self.n_itl]]

    # ------------------------------------------------------------------ events
    def _record_itl(self, t: float, gap: float) -> None:
        itl = self.history.itl
        if self.n_itl == len(itl):
            itl.append((t, gap))
        self.n_itl += 1

    def _on_step(self, ev: dict) -> None:
        self.step = ev["step"]
        hist = self.history.steps
        if self.n_steps == len(hist):
            hist.append(
                (
                    ev["t"],
                    ev["step"],
                    self.n_used,
                    self.n_cached,
                    self.n_free,
                    ev["num_tokens"],
                    ev["duration"],
                    ev["seq"],
                )
            )
        self.n_steps += 1

    def _on_hit_rates(self, ev: dict) -> None:
        self.hit_rates = ev
        self._record_tier_hits(ev)
        hist = self.history.hits
        if self.n_hits == len(hist):
            w = ev.get("window") or {}
            hist.append(
                (
                    ev["t"],
                    ev["token_hit_rate"],
                    ev["request_hit_rate"],
                    ev["block_hit_rate"],
                    w.get("token_hit_rate"),
                    w.get("request_hit_rate"),
                    w.get("block_hit_rate"),
                    ev["seq"],
                )
            )
        self.n_hits += 1
