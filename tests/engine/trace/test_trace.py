import json

import pytest

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.trace import EVENT_FIELDS, SCHEMA_VERSION, TraceError, parse_trace_lines, read_trace, schema_text
from tests.helpers.tiny_models import random_prompts, tiny_model


class PoolRebuild:
    """Rebuild the pool (ref counts, free set) and every block table from events alone."""

    def __init__(self, header):
        self.refs = [0] * header["num_blocks"]
        self.free = set(range(header["num_blocks"]))
        self.tables: dict[str, dict[int, int]] = {}

    def apply(self, e):
        kind = e["type"]
        if kind == "block_allocated":
            self.free.remove(e["physical"])
            self.refs[e["physical"]] = 1
            self.tables.setdefault(e["request_id"], {})[e["logical"]] = e["physical"]
        elif kind == "block_shared":
            self.free.discard(e["physical"])
            self.refs[e["physical"]] = e["ref_count"]
            self.tables.setdefault(e["request_id"], {})[e["logical"]] = e["physical"]
        elif kind == "block_released":
            self.refs[e["physical"]] = e["ref_count"]
            table = self.tables[e["request_id"]]
            # a copy-on-write already put the copy there
            if table.get(e["logical"]) == e["physical"]:
                del table[e["logical"]]
        # a cached block stays out of the free list until evicted
        elif kind in ("block_freed", "block_evicted"):
            self.free.add(e["physical"])

    def table(self, request_id):
        table = self.tables.get(request_id, {})
        return [table[i] for i in range(len(table))]


def run_recorded(tmp_path, num_blocks=14):
    model = tiny_model("llama-gqa")
    engine = Engine.from_model(
        model, config=EngineConfig(block_size=4, num_blocks=num_blocks, max_batched_tokens=16)
    )
    # two requests share a prefix: hits, cached blocks, evictions
    shared = random_prompts([9], seed=9)[0]
    path = tmp_path / "trace.jsonl"
    engine.add_trace_file(path)
    snapshots = {}

    def snapshot(event):
        # the engine's own state when each event is emitted; tables are compared at step boundaries
        tables = {rid: list(r.block_table) for rid, r in engine.requests.items()}
        snapshots[event["seq"]] = (list(engine.cache.pool.ref_counts), set(engine.cache.pool.free), tables)

    engine.trace.listeners.append(snapshot)
    engine.generate(
        random_prompts([10, 11, 9, 12, 3], seed=2) + [shared + [5, 6], shared + [7]],
        SamplingParams(max_tokens=14),
    )
    engine.close()
    return path, snapshots


def test_trace_alone_rebuilds_the_pool_and_every_block_table(tmp_path):
    path, snapshots = run_recorded(tmp_path)
    trace = read_trace(path, strict=True)
    assert trace.header["schema"] == SCHEMA_VERSION and trace.header["num_blocks"] == 14
    rebuild = PoolRebuild(trace.header)
    kinds = set()
    for event in trace.events:
        rebuild.apply(event)
        kinds.add(event["type"])
        refs, free, tables = snapshots[event["seq"]]
        assert rebuild.refs == refs, f"ref counts differ at seq {event['seq']}"
        # announced just before the pool takes it back
        if event["type"] not in ("block_evicted", "radix_evict"):
            assert rebuild.free == free, f"free list differs at seq {event['seq']}"
        if event["type"] in ("step", "request_finished", "request_preempted"):
            for rid, table in tables.items():
                assert rebuild.table(rid) == table, f"table of {rid} differs at seq {event['seq']}"
    assert {
        "request_preempted",
        "block_allocated",
        "block_freed",
        "token_emitted",
        "step",
        "block_cached",
        "block_evicted",
        "block_shared",
    } <= kinds
    assert not any(rebuild.refs)


def test_every_event_written_follows_the_schema(tmp_path):
    path, _ = run_recorded(tmp_path, num_blocks=64)
    lines = path.read_text().splitlines()
    events = [json.loads(line) for line in lines[1:]]
    assert [e["seq"] for e in events] == list(range(len(events)))
    for event in events:
        # a field whose type ends in "?" may be left out
        required = {name for name, (spec, _) in EVENT_FIELDS[event["type"]].items() if not spec.endswith("?")}
        assert required <= set(event)
        assert set(event) - {"seq", "t", "type"} <= set(EVENT_FIELDS[event["type"]])


def test_bad_line_is_reported_by_number_and_earlier_events_are_kept(tmp_path):
    path, _ = run_recorded(tmp_path, num_blocks=64)
    lines = path.read_text().splitlines(keepends=True)
    broken = lines[:6] + ['{"seq": 5, "t": 0.1, "type": "block_teleported"}\n'] + lines[6:]
    trace = parse_trace_lines(broken)
    assert trace.error is not None and trace.error.line == 7 and "block_teleported" in str(trace.error)
    assert len(trace.events) == 5
    with pytest.raises(TraceError, match="line 7"):
        parse_trace_lines(broken, strict=True)
    missing = lines[:3] + ['{"seq": 2, "t": 0.1, "type": "block_freed"}\n']
    assert "missing field 'physical'" in str(parse_trace_lines(missing).error)


def test_truncated_last_line_is_not_an_error(tmp_path):
    path, _ = run_recorded(tmp_path, num_blocks=64)
    text = path.read_text()
    # a writer that died mid-line
    cut = text[: len(text) - 20]
    trace = parse_trace_lines(cut.splitlines(keepends=True))
    assert trace.error is None and trace.truncated_tail
    assert len(trace.events) == len(text.splitlines()) - 2


def test_header_problems_are_explained():
    assert "header" in str(parse_trace_lines(['{"seq": 0}\n']).error)
    assert "schema version" in str(parse_trace_lines(['{"type": "header", "schema": 99}\n']).error)
    assert "empty" in str(parse_trace_lines([]).error)


def test_schema_text_documents_every_event():
    text = schema_text()
    for etype, fields in EVENT_FIELDS.items():
        assert f"{etype}:" in text
        for name in fields:
            assert name in text
