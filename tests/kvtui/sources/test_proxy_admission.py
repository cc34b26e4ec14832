"""The live proxy at admission: the step that stored a run of a waiting request's prompt blocks admitted it
(the earliest forwarded of those that share the run), and what the cache held for it then is what vLLM
served; on a real saturated log, fed as the proxy got it, every request agrees."""

from __future__ import annotations

import json

from kvtui.sources.proxy_admission import AdmissionWatch
from kvtui.sources.proxy_events import events_path, read_events

LOG = "fixtures/attach/vllm_0.32_proxy_waves.jsonl"
BS = 4


def stored(tokens: list[int], first: int, hashes: list[str], parent: str | None) -> dict:
    return {"hashes": hashes, "parent": parent, "tokens": tokens[first * BS : (first + len(hashes)) * BS]}


def test_a_real_saturated_log_agrees_at_every_admission():
    records = [json.loads(line) for line in open(LOG)]
    timeline = [(b["t"], 1, b) for b in read_events(events_path(LOG))]
    for r in records:
        end = r["forwarded"] + r["ttft"] + r["tpot"] * (len(r["output_token_ids"]) - 1)
        timeline += [(r["forwarded"], 0, r), (end, 2, r)]
    watch = AdmissionWatch()
    settled = {}
    for _, kind, x in sorted(timeline, key=lambda e: (e[0], e[1])):
        if kind == 0:
            watch.forwarded(x["request_id"], x["prompt_token_ids"], None, 32)
        elif kind == 1:
            watch.fold(x)
        else:
            settled[x["request_id"]] = watch.settle(x["request_id"], x["cached_tokens"])
    assert len(settled) == 24
    assert all(s["agrees_at_admission"] for s in settled.values()), settled
    # every request but those whose whole blocks were all cached was seen admitted
    assert sum(s["admitted"] is not None for s in settled.values()) >= 20
    assert watch.queued() == []


def test_a_shared_run_admits_the_earliest_and_a_removal_in_the_step_is_not_served():
    doc = list(range(100, 112))
    a, b = doc + [1, 2, 3, 4, 5], doc + [6, 7, 8, 9, 5]
    watch = AdmissionWatch()
    watch.forwarded("a", a, None, BS)
    watch.forwarded("b", b, None, BS)
    assert watch.queued() == ["a", "b"]
    # step 1: a's four blocks (the document and its own)
    watch.fold({"ts": 1.0, "stored": [stored(a, 0, ["d0", "d1", "d2", "a3"], None)], "removed": []})
    assert watch.queued() == ["b"]
    # step 2: the document's last block is evicted, and b stores from there (its own block after it)
    watch.fold({"ts": 2.0, "stored": [stored(b, 2, ["e2", "b3"], "d1")], "removed": ["d2"]})
    assert watch.settle("a", 0) == {"admitted": 1.0, "predicted_at_admission": 0, "agrees_at_admission": True}
    assert watch.settle("b", 8) == {"admitted": 2.0, "predicted_at_admission": 8, "agrees_at_admission": True}


def test_a_request_never_seen_admitted_is_judged_at_its_answer():
    doc = list(range(100, 109))
    watch = AdmissionWatch()
    watch.fold({"ts": 1.0, "stored": [stored(doc, 0, ["d0", "d1"], None)], "removed": []})
    # its two whole blocks were cached: its admission stored nothing
    watch.forwarded("c", doc, None, BS)
    assert watch.settle("c", 8) == {
        "admitted": None,
        "predicted_at_admission": 8,
        "agrees_at_admission": True,
    }
    assert watch.settle("c", 8) == {}
