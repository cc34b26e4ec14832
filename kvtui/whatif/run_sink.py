"""The trace sink of a what-if worker that writes no trace: only the events the run reads are built and handed
on (prefix matches, tree inserts, evictions, preemptions, and what leaves a lower tier: the miss ledger's, the
worker's and the tiers' own); every other
event still takes its sequence number, so the numbers are those of the trace the run would write. A
production-size run emits over a million events, most of which nobody would read."""

from __future__ import annotations

from engine.trace.writer import TraceSink

READ = frozenset({"prefix_match", "radix_insert", "block_evicted", "request_preempted", "host_evicted"})


class RunSink(TraceSink):
    def emit(self, etype: str, **fields) -> dict:
        if etype in READ:
            return super().emit(etype, **fields)
        fields["seq"], fields["type"] = self._seq, etype
        self._seq += 1
        return fields
