"""A kvtui trace as a Perfetto trace (protobuf), built with the `perfetto` package's `TraceProtoBuilder`.

Open the file in https://ui.perfetto.dev (Open trace file). What it holds:
- one track per request, named by its id (under a "requests" track): `queued` slices (arrival or preemption to admission), one slice per
  prefill chunk and per decode step (the engine step's wall time, positions as arguments), and instant events
  for edits, preemptions, prefix misses (with their reason) and invalidations;
- counter tracks: free / used / cached blocks and tokens per step (sampled at every engine step), and the three
  cumulative hit rates (token, request, block) at every `hit_rates` event;
- an `evictions` track with one instant event per evicted block (policy, radix node, hash).

Torch-free: it reads events and the reducer's pool counts only.
"""

from __future__ import annotations

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import CounterDescriptor, TracePacket, TrackEvent
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

from kvtui.state import CacheState
from kvtui.state.timeline import is_miss

SEQUENCE_ID = 1
ROOT_UUID = 1
COUNTERS = (
    "free blocks",
    "used blocks",
    "cached blocks",
    "tokens per step",
    "token hit rate",
    "request hit rate",
    "block hit rate",
)
SLICE_BEGIN, SLICE_END = TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END
INSTANT, COUNTER = TrackEvent.TYPE_INSTANT, TrackEvent.TYPE_COUNTER


def _ns(t: float) -> int:
    return int(round(t * 1e9))


class _Builder:
    """Tracks by name, packets on one trusted sequence."""

    def __init__(self, title: str):
        self.builder = TraceProtoBuilder()
        self.uuids: dict[str | tuple[str, str], int] = {}
        self.first = True
        self._track(ROOT_UUID, title, parent=None)

    def _packet(self) -> TracePacket:
        packet = self.builder.add_packet()
        packet.trusted_packet_sequence_id = SEQUENCE_ID
        if self.first:
            packet.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
            self.first = False
        return packet

    def _track(self, uuid: int, name: str, parent: int | None, counter: bool = False, unit: str = "") -> None:
        packet = self._packet()
        desc = packet.track_descriptor
        desc.uuid = uuid
        desc.name = name
        if parent is not None:
            desc.parent_uuid = parent
        if counter:
            desc.counter.CopyFrom(CounterDescriptor(unit_name=unit) if unit else CounterDescriptor())

    def track(self, key: str | tuple[str, str], counter: bool = False, unit: str = "") -> int:
        """A track by key: a name (under the root), or ("request", id): the track named `id` under "requests"."""
        uuid = self.uuids.get(key)
        if uuid is None:
            parent, name = ROOT_UUID, key
            if isinstance(key, tuple):
                parent, name = self.track("requests"), key[1]
            uuid = self.uuids[key] = len(self.uuids) + 2
            self._track(uuid, name, parent, counter, unit)
        return uuid

    def event(
        self, track: str | tuple[str, str], t: float, kind: int, name: str = "", args: dict | None = None
    ) -> None:
        # the track's descriptor goes before its first event
        uuid = self.track(track)
        packet = self._packet()
        packet.timestamp = _ns(t)
        ev = packet.track_event
        ev.type = kind
        ev.track_uuid = uuid
        if name:
            ev.name = name
        for key, value in (args or {}).items():
            ann = ev.debug_annotations.add()
            ann.name = key
            if isinstance(value, bool):
                ann.bool_value = value
            elif isinstance(value, int):
                ann.int_value = value
            elif isinstance(value, float):
                ann.double_value = value
            else:
                ann.string_value = str(value)

    def slice(
        self, track: str | tuple[str, str], t0: float, t1: float, name: str, args: dict | None = None
    ) -> None:
        self.event(track, t0, SLICE_BEGIN, name, args)
        self.event(track, max(t0, t1), SLICE_END)

    def counter(self, track: str, t: float, value: float, unit: str = "") -> None:
        self.track(track, counter=True, unit=unit)
        packet = self._packet()
        packet.timestamp = _ns(t)
        ev = packet.track_event
        ev.type = COUNTER
        ev.track_uuid = self.uuids[track]
        ev.double_counter_value = float(value)


def request_track(request_id: str) -> tuple[str, str]:
    """A request's track: named by its id, under the "requests" track."""
    return ("request", request_id)


def build_perfetto(header: dict, events: list[dict], title: str = "kvtui") -> bytes:
    """The serialized Perfetto trace of a kvtui trace's header and events."""
    out = _Builder(title)
    # counter tracks first, so they sit together at the top
    for name in COUNTERS:
        out.track(name, counter=True, unit="%" if name.endswith("rate") else "")
    state = CacheState(header)
    queued_since: dict[str, float] = {}
    # prefill_chunk / decode events of the step in progress
    step_chunks: list[dict] = []
    last_step_end = 0.0
    # request id -> when its last slice ended (a step's time includes scheduling)
    lane_free: dict[str, float] = {}
    for ev in events:
        state.apply(ev)
        etype, t = ev["type"], ev["t"]
        rid = ev.get("request_id")
        if etype == "request_arrived":
            out.track(request_track(rid))
            queued_since[rid] = t
        elif etype == "request_scheduled":
            start = queued_since.pop(rid, None)
            if start is not None:
                out.slice(request_track(rid), start, t, "queued", {"num_computed": ev["num_computed"]})
                lane_free[rid] = t
        elif etype in ("prefill_chunk", "decode"):
            step_chunks.append(ev)
        elif etype == "step":
            # steps never overlap on a track
            begin = min(t, max(last_step_end, t - ev["duration"]))
            last_step_end = t
            for chunk in step_chunks:
                args = {"step": chunk["step"], "tokens in step": ev["num_tokens"]}
                if chunk["type"] == "prefill_chunk":
                    name = f"prefill {chunk['start']}..{chunk['end']}"
                    args.update(start=chunk["start"], end=chunk["end"], tokens=chunk["end"] - chunk["start"])
                else:
                    name = f"decode {chunk['position']}"
                    args.update(position=chunk["position"])
                lane = chunk["request_id"]
                out.slice(request_track(lane), min(t, max(begin, lane_free.get(lane, 0.0))), t, name, args)
                lane_free[lane] = t
            step_chunks = []
            out.counter("free blocks", t, state.n_free)
            out.counter("used blocks", t, state.n_used)
            out.counter("cached blocks", t, state.n_cached)
            out.counter("tokens per step", t, ev["num_tokens"])
        elif etype == "hit_rates":
            out.counter("token hit rate", t, 100 * ev["token_hit_rate"], "%")
            out.counter("request hit rate", t, 100 * ev["request_hit_rate"], "%")
            out.counter("block hit rate", t, 100 * ev["block_hit_rate"], "%")
        elif etype == "request_preempted":
            out.event(request_track(rid), t, INSTANT, "preempted", {"tokens to recompute": ev["num_tokens"]})
            queued_since[rid] = t
        elif etype == "edit":
            out.event(
                request_track(rid),
                t,
                INSTANT,
                f"edit {ev['kind']} @{ev['position']}",
                {
                    "position": ev["position"],
                    "kind": ev["kind"],
                    "new tokens": len(ev["token_ids"]),
                    "text": "".join(ev["texts"]),
                    "deleted": ev["num_deleted"],
                },
            )
        elif etype == "invalidate":
            out.event(
                request_track(rid),
                t,
                INSTANT,
                f"invalidate from {ev['first_recomputed']}",
                {
                    "kept blocks": len(ev["kept"]),
                    "dropped blocks": len(ev["dropped"]),
                    "copied blocks": len(ev["copied"]),
                    "recompute tokens": ev["recompute_tokens"],
                },
            )
        elif etype == "prefix_match" and is_miss(ev):
            args = {
                "reason": ev["reason"],
                "matched tokens": ev["matched_tokens"],
                "prompt tokens": ev["prompt_tokens"],
            }
            args.update(
                {k: v for k, v in (ev.get("detail") or {}).items() if isinstance(v, (int, float, str))}
            )
            out.event(request_track(rid), t, INSTANT, f"miss: {ev['reason']}", args)
        elif etype == "block_evicted":
            out.event(
                "evictions",
                t,
                INSTANT,
                f"evict block {ev['physical']}",
                {
                    "physical": ev["physical"],
                    "policy": ev["policy"],
                    "node": ev["node_id"],
                    "hash": ev["hash"],
                },
            )
        elif etype == "request_finished":
            out.event(
                request_track(rid),
                t,
                INSTANT,
                f"finished ({ev['reason']})",
                {"output tokens": ev["num_output_tokens"], "cached tokens": ev["cached_tokens"]},
            )
    return out.builder.serialize()
