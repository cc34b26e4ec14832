"""What a fleet knows of its sources (kvtui/sources/attach.py's streams): gaps, restarts and malformed messages
(`attach_gap`, `attach_malformed`), a server taken as down (`attach_server`), and each server's /metrics facts
(`attach_metrics`). A mixin of `FleetState` (kvtui/state/fleet.py): its `_on_` handlers fold those events."""

from __future__ import annotations

from dataclasses import dataclass

from kvtui.state.fleet_workers import Worker


@dataclass
class SourceCounts:
    gaps: int = 0
    lost: int = 0
    restarts: int = 0
    malformed: int = 0
    # batches lost since the last restart (a restart starts an empty cache: nothing older matters)
    unseen: int = 0
    # why its server is taken as down (its /metrics stopped answering), else None
    down: str | None = None


class FleetSources:
    """Needs from the fleet state: sources, metrics, metrics_before, metrics_first, notes and t."""

    def _source(self, source: str) -> SourceCounts:
        counts = self.sources.get(source)
        if counts is None:
            counts = self.sources[source] = SourceCounts()
        return counts

    def _on_attach_gap(self, e: dict) -> None:
        counts = self._source(e["source"])
        if e["kind"] == "restart":
            counts.restarts += 1
            counts.unseen = 0
            counts.down = None
        else:
            counts.gaps += 1
            counts.lost += e["lost"]
            counts.unseen += e["lost"]
        if e["kind"] == "restart" or e["lost"]:
            what = (
                "restarted"
                if e["kind"] == "restart"
                else f"{e['kind'].replace('_', ' ')}: {e['lost']} batch(es) lost, {e['recovered']} replayed"
            )
            self._note(f"{e['source']} {what} (seq {e['expected']} -> {e['got']})")

    def _on_attach_server(self, e: dict) -> None:
        counts = self._source(e["source"])
        counts.down = None if e["up"] else e["reason"]
        self._note(
            f"{e['source']}: " + ("/metrics answers again" if e["up"] else f"server down? {e['reason']}")
        )

    def _on_attach_malformed(self, e: dict) -> None:
        self._source(e["source"]).malformed += 1
        self._note(f"{e['source']}: malformed message ({e['reason']})")

    def _on_attach_metrics(self, e: dict) -> None:
        key = (e["source"], e["rank"])
        if key in self.metrics:
            self.metrics_before[key] = self.metrics[key]
        facts = e["facts"]
        first = self.metrics_first.get(key)
        # a new process counts from 0 again: the trace's totals restart with it
        if first is None or facts.get("prefix_queries", 0.0) < self.metrics[key].get("prefix_queries", 0.0):
            self.metrics_first[key] = facts
        self.metrics[key] = facts

    def _note(self, text: str) -> None:
        self.notes.append(f"{self.t:.2f}s {text}")
        del self.notes[:-50]

    # ------------------------------------------------------------------ reading
    def facts(self, worker: Worker) -> tuple[dict, dict | None]:
        """The latest /metrics facts of a worker's server, and the ones before them: its rank's samples over
        the server's unlabelled ones (those are every rank's: SGLang labels its radix-cache counters with
        dp_rank, its token usage and hit rate without)."""
        shared = (worker.source, "")
        own = (worker.source, str(worker.rank)) if worker.rank is not None else shared
        if own not in self.metrics or own == shared or shared not in self.metrics:
            for key in (own, shared):
                if key in self.metrics:
                    return self.metrics[key], self.metrics_before.get(key)
            return {}, None
        before = [self.metrics_before.get(key) for key in (shared, own)]
        return {**self.metrics[shared], **self.metrics[own]}, (
            {**(before[0] or {}), **(before[1] or {})} if any(before) else None
        )

    def unseen(self, worker: Worker) -> int:
        """Batches of the worker's stream lost since its last restart: its view of the cache is incomplete."""
        counts = self.sources.get(worker.source)
        return counts.unseen if counts is not None else 0

    def capacity(self, worker: Worker) -> int | None:
        """GPU blocks of the worker, when known (blocks= option, else vLLM's cache_config_info)."""
        return worker.blocks or self.facts(worker)[0].get("num_gpu_blocks")
