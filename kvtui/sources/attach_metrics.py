"""The attacher's /metrics side (a mixin of `Attacher`, kvtui/sources/attach.py): a thread polls each server's
Prometheus page; the attach loop turns each reading into an `attach_metrics` event, a page that stops answering
into `attach_server` (up false: the server may be down, its blocks are stale), and a reading from a new process
(a later process start time, or token counters that went back) into a restart that clears the source's workers,
before the new process publishes anything.
"""

from __future__ import annotations

import queue

from kvtui.sources.endpoints import Source


class MetricsPolling:
    """Needs from the attacher: sources, sink, notices, counters, metrics_every, _stop, _metrics (a queue),
    _streams and _server_marks."""

    def _poll_metrics(self) -> None:
        from kvtui.sources.prometheus import fetch, summarize

        urls = {}
        for source in self.sources:
            if source.metrics:
                urls.setdefault(source.metrics, []).append(source)
        failed: set[str] = set()
        while not self._stop.is_set():
            for url, sources in urls.items():
                try:
                    ranks = summarize(fetch(url, timeout=min(2.0, self.metrics_every)))
                except (OSError, ValueError) as exc:
                    if url not in failed:
                        self.notices.put(("warning", f"metrics {url}: {exc}"))
                        failed.add(url)
                        for source in sources:
                            self._metrics.put((source, str(exc)))
                    continue
                if url in failed:
                    failed.discard(url)
                    for source in sources:
                        self._metrics.put((source, None))
                for source in sources:
                    self._metrics.put((source, ranks))
            self._stop.wait(self.metrics_every)

    def _emit_metrics(self) -> None:
        while True:
            try:
                source, ranks = self._metrics.get_nowait()
            except queue.Empty:
                return
            if ranks is None or isinstance(ranks, str):
                # its /metrics stopped (a reason) or started again (None) answering
                up = ranks is None
                self.sink.emit(
                    "attach_server", source=source.endpoint, up=up, reason=ranks or "answers again"
                )
                continue
            self.emit_metrics(source, ranks)

    def emit_metrics(self, source: Source, ranks: dict[str, dict]) -> None:
        for rank, facts in sorted(ranks.items()):
            if source.dp_rank is not None and rank not in ("", str(source.dp_rank)):
                # another rank's server samples: that rank's own source reports them
                continue
            if not facts:
                continue
            self._server_restarted(source, rank, facts)
            self.sink.emit("attach_metrics", source=source.endpoint, rank=rank, facts=facts)

    def _server_restarted(self, source: Source, rank: str, facts: dict) -> None:
        """A /metrics reading from a new process (a later start time, or token counters that went back): the
        server restarted, its cache is empty, even before it publishes again."""
        key = (source.endpoint, rank)
        mark = (facts.get("prefix_queries"), facts.get("started"))
        before = self._server_marks.get(key)
        self._server_marks[key] = mark
        if before is None:
            return
        queries_back = mark[0] is not None and before[0] is not None and mark[0] < before[0]
        new_process = mark[1] is not None and before[1] is not None and mark[1] > before[1]
        if not (queries_back or new_process):
            return
        for stream in self._streams.values():
            if stream.source is source and stream.workers:
                self.counters.restarts += 1
                self.sink.emit(
                    "attach_gap",
                    source=source.endpoint,
                    kind="restart",
                    expected=stream.tracker.applied + 1,
                    got=0,
                    recovered=0,
                    lost=0,
                )
                for worker in stream.workers.values():
                    self.sink.emit("kv_all_cleared", worker=worker, cause="restart")
                stream.tracker.restart()
