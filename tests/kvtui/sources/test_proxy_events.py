"""The server's KV-event stream kept beside the proxy's log: each published batch one line (its engine time,
worker, sequence number, stored runs with parents and token ids, removed hashes), bounded by rotation, and read
back in order."""

from __future__ import annotations

import json

import msgspec

from kvtui.sources.attach import stamp
from kvtui.sources.proxy_events import EventsLog, events_path, read_events
from kvtui.sources.wire import decode_payload


def published(ts: float, events: list, worker: str = "vllm", seq: int = 0) -> list:
    """A vLLM payload decoded and stamped as the proxy's attacher hands it to its listeners."""
    batch = decode_payload(msgspec.msgpack.encode([ts, events, None]))
    stamp(batch, worker, seq, 0.5)
    return batch.events


STORED = {
    "type": "BlockStored",
    "block_hashes": [11, 12],
    "parent_block_hash": None,
    "token_ids": [1, 2, 3, 4],
    "block_size": 2,
    "medium": "GPU",
}


def test_the_events_file_sits_beside_the_log():
    assert events_path("/logs/requests.jsonl") == "/logs/requests.events.jsonl"
    assert events_path("requests") == "requests.events.jsonl"


def test_each_batch_is_one_line_with_its_time_worker_and_blocks(tmp_path):
    path = tmp_path / "requests.events.jsonl"
    log = EventsLog(str(path))
    log.write(published(1700000000.25, [STORED], seq=7))
    removed = {"type": "BlockRemoved", "block_hashes": [12], "medium": "GPU"}
    log.write(published(1700000000.5, [removed, {"type": "AllBlocksCleared"}], seq=8))
    # a CPU tier's removal is not the device pool's
    log.write(published(1700000000.75, [{**removed, "medium": "CPU"}], seq=9))
    log.close()
    first, second, third = (json.loads(line) for line in path.read_text().splitlines())
    assert first["ts"] == 1700000000.25 and first["worker"] == "vllm" and first["seq"] == 7
    assert first["stored"] == [
        {"hashes": ["000000000000000b", "000000000000000c"], "parent": None, "tokens": [1, 2, 3, 4]}
    ]
    assert first["removed"] == [] and "cleared" not in first
    assert second["removed"] == ["000000000000000c"] and second["cleared"] is True
    assert third["removed"] == []
    assert log.batches == 3


def test_a_long_run_rotates_and_is_read_back_in_order(tmp_path):
    path = tmp_path / "requests.events.jsonl"
    log = EventsLog(str(path), max_bytes=400)
    for i in range(12):
        log.write(published(float(i), [STORED], seq=i))
    log.close()
    assert path.stat().st_size <= 400 and (tmp_path / "requests.events.jsonl.1").stat().st_size <= 400
    seqs = [b["seq"] for b in read_events(str(path))]
    # the oldest are gone; what is kept is in order and ends with the last
    assert seqs == list(range(12 - len(seqs), 12)) and len(seqs) < 12


def test_a_torn_last_line_is_left_out(tmp_path):
    path = tmp_path / "requests.events.jsonl"
    path.write_text('{"ts": 1.0, "stored": [], "removed": []}\n{"ts": 2.0, "sto')
    assert read_events(str(path)) == [{"ts": 1.0, "stored": [], "removed": []}]
    assert read_events(str(tmp_path / "missing.jsonl")) == []
