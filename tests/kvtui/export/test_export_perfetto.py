"""kvtui/export/perfetto.py and `kvtui export --perfetto`: the file read back with the perfetto package's protos."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from click.testing import CliRunner
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

from engine.trace import TraceWriter
from kvtui.cli import main
from kvtui.export.perfetto import COUNTERS, build_perfetto
from tests.helpers.tiny_trace import hybrid_trace


def read_back(data: bytes):
    """Tracks by name, and per track its events as (timestamp, type, name, {arg: value})."""
    trace = Trace()
    trace.ParseFromString(data)
    names, counters, events = {}, set(), defaultdict(list)
    for packet in trace.packet:
        assert packet.trusted_packet_sequence_id == 1
        if packet.HasField("track_descriptor"):
            desc = packet.track_descriptor
            # a request's track is named by its id under "requests"; read back as "request <id>"
            parent = names.get(desc.parent_uuid) if desc.HasField("parent_uuid") else None
            names[desc.uuid] = f"request {desc.name}" if parent == "requests" else desc.name
            if desc.HasField("counter"):
                counters.add(desc.name)
        elif packet.HasField("track_event"):
            ev = packet.track_event
            args = {a.name: (a.string_value or a.int_value or a.double_value) for a in ev.debug_annotations}
            value = ev.double_counter_value if ev.type == TrackEvent.TYPE_COUNTER else None
            events[names[ev.track_uuid]].append((packet.timestamp, ev.type, ev.name, args, value))
    return names, counters, events


def write_trace(path: Path, header: dict, events) -> None:
    writer = TraceWriter(path)
    writer.write_header(header)
    for ev in events:
        writer.write(ev)
    writer.close()


def test_export_reads_back_with_every_track(tmp_path):
    header, events = hybrid_trace()
    trace = tmp_path / "hybrid.jsonl"
    write_trace(trace, header, events)
    out = tmp_path / "hybrid.pftrace"
    result = CliRunner().invoke(main, ["export", str(trace), "--perfetto", str(out)])
    assert result.exit_code == 0, result.output
    names, counters, tracks = read_back(out.read_bytes())

    requests = [ev["request_id"] for ev in events if ev["type"] == "request_arrived"]
    # every request has a track named exactly its id, under the "requests" track
    assert {n[len("request ") :] for n in names.values() if n.startswith("request ")} - {"hit rate"} == set(
        requests
    )
    assert set(COUNTERS) <= counters

    # one slice per prefill chunk and decode step on its request's track, begin before end, balanced
    for rid in requests:
        lane = tracks[f"request {rid}"]
        begins = [e for e in lane if e[1] == TrackEvent.TYPE_SLICE_BEGIN]
        ends = [e for e in lane if e[1] == TrackEvent.TYPE_SLICE_END]
        assert len(begins) == len(ends)
        chunks = [ev for ev in events if ev["type"] == "prefill_chunk" and ev["request_id"] == rid]
        decodes = [ev for ev in events if ev["type"] == "decode" and ev["request_id"] == rid]
        assert [e[2] for e in begins if e[2].startswith("prefill")] == [
            f"prefill {c['start']}..{c['end']}" for c in chunks
        ]
        assert sum(e[2].startswith("decode") for e in begins) == len(decodes)
        assert any(e[2] == "queued" for e in begins)
        depth = 0
        # slices never overlap on one track
        for e in sorted(lane, key=lambda e: e[0]):
            depth += {TrackEvent.TYPE_SLICE_BEGIN: 1, TrackEvent.TYPE_SLICE_END: -1}.get(e[1], 0)
            assert depth in (0, 1)

    instants = [
        (track, e[2], e[3]) for track, lane in tracks.items() for e in lane if e[1] == TrackEvent.TYPE_INSTANT
    ]
    preempted = [ev["request_id"] for ev in events if ev["type"] == "request_preempted"]
    assert preempted and sorted(t for t, name, _ in instants if name == "preempted") == sorted(
        f"request {rid}" for rid in preempted
    )
    edit = next(ev for ev in events if ev["type"] == "edit")
    assert (f"request {edit['request_id']}", f"edit replace @{edit['position']}") in [
        (t, n) for t, n, _ in instants
    ]
    assert any(n.startswith("invalidate from") for _, n, _ in instants)
    evicted = [ev["physical"] for ev in events if ev["type"] == "block_evicted"]
    assert evicted and [a["physical"] for t, n, a in instants if t == "evictions"] == evicted
    misses = [(t, n, a) for t, n, a in instants if n.startswith("miss: ")]
    assert misses and all(a["reason"] == n[len("miss: ") :] for _, n, a in misses)

    # counters: one sample per step; tokens per step equals the step events; free + used + cached = pool
    steps = [ev for ev in events if ev["type"] == "step"]
    assert [e[4] for e in tracks["tokens per step"]] == [float(s["num_tokens"]) for s in steps]
    assert [e[4] for e in tracks["free blocks"]] == [float(s["free_blocks"]) for s in steps]
    total = [
        sum(v)
        for v in zip(*(([e[4] for e in tracks[n]]) for n in ("free blocks", "used blocks", "cached blocks")))
    ]
    assert total == [float(header["num_blocks"])] * len(steps)
    rates = [ev for ev in events if ev["type"] == "hit_rates"]
    assert [e[4] for e in tracks["token hit rate"]] == [100 * r["token_hit_rate"] for r in rates]
    assert "https://ui.perfetto.dev" in result.output


def test_export_fixture_trace_and_bad_input(tmp_path):
    fixture = Path(__file__).resolve().parents[3] / "fixtures" / "traces" / "edit_series.jsonl"
    names, _, tracks = read_back(build_perfetto(*_load(fixture)))
    assert sum(name.startswith("request ") for name in names.values()) >= 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    result = CliRunner().invoke(main, ["export", str(bad), "--perfetto", str(tmp_path / "o.pftrace")])
    assert result.exit_code == 1 and "line 1" in result.output and "Traceback" not in result.output


def _load(path):
    from kvtui.app.loader import load_trace

    loaded = load_trace(str(path))
    return loaded.header, loaded.events
