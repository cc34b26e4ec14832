"""The one trace reader (engine/trace/reader.py) against corrupted fixture traces: truncated, bytes flipped,
lines dropped, duplicated and reordered, fields of the wrong type, a 100 MB line. Whatever the damage, the
tolerant reader returns the good prefix (exactly the lines before the one it names) or everything, never raises;
strict raises exactly when tolerant reports, naming the same line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.trace.reader import MAX_LINE_BYTES, TraceError, parse_trace_lines, read_header, read_trace
from engine.trace.schema import EVENT_FIELDS, FAST_CHECKS, validate_event

TRACES = sorted((Path(__file__).resolve().parents[3] / "fixtures" / "traces").glob("*.jsonl"))
DATA = {path.name: path.read_bytes() for path in TRACES}
WRONG = ["x", 1.5, None, [], {}, True, -1, 10**30]


def check_invariants(data: bytes, tmp_path: Path) -> None:
    """What the reader may return for `data`, whatever it is."""
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    got = read_trace(path)
    # file and memory agree
    assert got.events == parse_trace_lines(data.splitlines(keepends=True)).events
    lines = data.split(b"\n")
    for event in got.events:
        assert validate_event(event) is None
    assert (
        [e["seq"] for e in got.events]
        == list(range(got.events[0]["seq"], got.events[0]["seq"] + len(got.events)))
        if got.events
        else True
    )
    if got.error is not None:
        assert 1 <= got.error.line <= len(lines) and got.error.message
        # every line between the header and the named one
        before = lines[1 : got.error.line - 1]
        assert got.events == [json.loads(line) for line in before if line.strip()]
        with pytest.raises(TraceError) as raised:
            read_trace(path, strict=True)
        assert raised.value.line == got.error.line
    else:
        body = [line for line in lines[1:] if line.strip()]
        if got.truncated_tail:
            assert not data.endswith(b"\n")
            body = body[:-1]
        assert got.events == [json.loads(line) for line in body]
        assert read_trace(path, strict=True).events == got.events


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.stem)
def test_every_fixture_reads_whole_and_the_fast_check_agrees_with_the_schema(path):
    trace = read_trace(path, strict=True)
    body = [json.loads(line) for line in path.read_bytes().splitlines()[1:] if line.strip()]
    assert trace.events == body and trace.error is None and not trace.truncated_tail
    for event in body:
        assert FAST_CHECKS[event["type"]](event) and validate_event(event) is None


names = st.sampled_from(sorted(DATA))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=names, data=st.data())
def test_corrupted_traces_load_the_good_prefix_or_name_the_line(tmp_path, name, data):
    raw = DATA[name]
    lines = raw.split(b"\n")[:-1]
    op = data.draw(st.sampled_from(["truncate", "flip", "drop", "duplicate", "reorder", "wrong_type"]))
    if op == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    elif op == "flip":
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.integers(0, len(raw) - 1))
            raw = raw[:i] + bytes([raw[i] ^ data.draw(st.integers(1, 255))]) + raw[i + 1 :]
    else:
        j = data.draw(st.integers(1, len(lines) - 1))
        if op == "drop":
            del lines[j]
        elif op == "duplicate":
            lines.insert(j, lines[j])
        elif op == "reorder":
            k = data.draw(st.integers(1, len(lines) - 1))
            lines[j], lines[k] = lines[k], lines[j]
        else:
            event = json.loads(lines[j])
            key = data.draw(st.sampled_from(sorted(event)))
            event[key] = data.draw(st.sampled_from(WRONG))
            lines[j] = json.dumps(event).encode()
        raw = b"\n".join(lines) + b"\n"
    check_invariants(raw, tmp_path)


@pytest.mark.parametrize(
    "op, line, expected",
    [
        ("duplicate", 8, "seq 5 does not follow 5"),
        ("drop", 7, "seq 6 follows 4: 1 event(s) missing"),
        ("reorder", 7, "seq 6 follows 4"),
        ("wrong_type", 7, "field 'seq' must be int"),
        ("flip_utf8", 7, "not valid UTF-8"),
        ("type_list", 7, "unknown event type []"),
    ],
)
def test_each_kind_of_damage_is_named(tmp_path, op, line, expected):
    lines = DATA["chat.jsonl"].split(b"\n")[:-1]
    if op == "duplicate":
        lines.insert(6, lines[6])
    elif op == "drop":
        del lines[6]
    elif op == "reorder":
        lines[6], lines[7] = lines[7], lines[6]
    elif op == "wrong_type":
        lines[6] = lines[6].replace(b'"seq":5', b'"seq":"5"')
    elif op == "flip_utf8":
        lines[6] = lines[6][:10] + b"\xff" + lines[6][11:]
    else:
        lines[6] = json.dumps({"seq": 5, "t": 0.1, "type": []}).encode()
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    trace = read_trace(path)
    assert trace.error is not None and trace.error.line == line and expected in trace.error.message, (
        trace.error
    )
    assert len(trace.events) == line - 2


def test_a_100_mb_line_is_named_and_the_prefix_kept(tmp_path):
    lines = DATA["chat.jsonl"].split(b"\n")[:-1]
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as out:
        out.write(b"\n".join(lines[:11]) + b"\n")
        out.write(b'{"seq": 10, "t": 0.5, "type": "decode", "junk": "' + b"x" * (100 << 20) + b'"}\n')
        out.write(b"\n".join(lines[11:]) + b"\n")
    trace = read_trace(path)
    assert trace.error is not None and trace.error.line == 12 and "longer than" in trace.error.message
    assert len(trace.events) == 10
    assert MAX_LINE_BYTES < 100 << 20


def test_header_damage_and_non_trace_files(tmp_path):
    path = tmp_path / "t.jsonl"
    for data, expected in [
        (b"", "empty file"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not valid UTF-8"),
        (b"hello world\n", "not valid JSON"),
        (b'{"type": "header", "schema": 1}\n', "header:"),
        (DATA["chat.jsonl"].replace(b'"block_size":16', b'"block_size":-3', 1), "out of range"),
    ]:
        path.write_bytes(data)
        trace = read_trace(path)
        assert trace.error is not None and trace.error.line == 1 and expected in trace.error.message, (
            data,
            trace,
        )
        header, error = read_header(path)
        assert header is None and expected in error.message


def test_fast_checks_agree_with_validate_event_on_wrong_types():
    for etype, fields in EVENT_FIELDS.items():
        base = {"seq": 1, "t": 0.5, "type": etype}
        for name, (spec, _) in fields.items():
            base[name] = {"int": 1, "float": 0.5, "str": "s", "list": [], "dict": {}, "bool": True}[
                spec.rstrip("?")
            ]
        assert FAST_CHECKS[etype](base) and validate_event(base) is None
        for name in [*fields, "seq", "t"]:
            for value in WRONG:
                event = {**base, name: value}
                assert FAST_CHECKS[etype](event) == (validate_event(event) is None), (etype, name, value)
            missing = {k: v for k, v in base.items() if k != name}
            assert FAST_CHECKS[etype](missing) == (validate_event(missing) is None), (etype, name)
