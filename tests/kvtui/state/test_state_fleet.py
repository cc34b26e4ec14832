"""FleetState (attach events -> workers, residency, the hash tree) and the fleet miss explainer."""

from __future__ import annotations

import pytest

from kvtui.state.fleet import FleetState
from kvtui.state.fleet_explain import QueryError, explain_prompt, parse_query
from kvtui.state.fleet_stats import workers_summary


class Fleet:
    def __init__(self):
        self.state = FleetState({"kind": "attach"})
        self.seq = 0

    def emit(self, etype, t=None, **fields):
        self.state.apply({"seq": self.seq, "t": float(self.seq if t is None else t), "type": etype, **fields})
        self.seq += 1

    def worker(self, name, source=None):
        self.emit("attach_worker", worker=name, source=source or f"tcp://h:{name}", name=name, rank=0)

    def store(self, w, hashes, tokens, parent=None, size=2, **kw):
        self.emit(
            "kv_block_stored",
            worker=w,
            hashes=hashes,
            parent=parent,
            token_ids=tokens,
            block_size=size,
            group=kw.pop("group", 0),
            wire_seq=0,
            engine_ts=0.0,
            **kw,
        )

    def remove(self, w, hashes, **kw):
        self.emit(
            "kv_block_removed",
            worker=w,
            hashes=hashes,
            group=kw.pop("group", 0),
            wire_seq=0,
            engine_ts=0.0,
            **kw,
        )


@pytest.fixture
def fleet():
    f = Fleet()
    for w in ("a", "b", "c"):
        f.worker(w)
    f.store("a", ["01", "02"], [1, 2, 3, 4])
    f.store("b", ["01"], [1, 2])
    f.store("b", ["03"], [3, 9], parent="01")
    f.store("c", ["11"], [1, 2], lora="sql")
    return f


def test_residency_tiers_and_clear(fleet):
    s = fleet.state
    # offloaded copy: not a second GPU block
    fleet.store("a", ["02"], [3, 4], parent="01", medium="CPU")
    assert s.workers["a"].resident == 2 and s.holders_of((0, "01")) == ["a", "b"]
    # GPU copy gone, CPU copy stays
    fleet.remove("a", ["02"])
    assert s.workers["a"].resident == 1 and s.holders_of((0, "02")) == ["a"]
    # never seen: ignored
    fleet.remove("a", ["99"])
    fleet.emit("kv_all_cleared", worker="a", cause="cleared")
    assert s.workers["a"].resident == 0 and s.holders_of((0, "01")) == ["b"] and not s.workers["a"].held
    summary = {w["name"]: w for w in workers_summary(s)}
    assert summary["a"]["blocks_stored"] == 3 and summary["a"]["blocks_removed"] == 2
    assert summary["b"]["resident_blocks"] == 2


def test_stream_troubles_are_counted_per_source(fleet):
    fleet.emit("attach_gap", source="tcp://h:a", kind="gap", expected=3, got=5, recovered=1, lost=1)
    fleet.emit("attach_gap", source="tcp://h:a", kind="restart", expected=6, got=0, recovered=0, lost=0)
    fleet.emit("attach_malformed", source="tcp://h:a", reason="2 frames", size=9)
    a = {w["name"]: w for w in workers_summary(fleet.state)}["a"]
    assert (a["gaps"], a["lost_batches"], a["restarts"], a["malformed"]) == (1, 1, 1, 1)
    assert any("malformed" in n for n in fleet.state.notes)


def reasons(fleet, ids, **kw):
    return {r["worker"]: (r["reason"], r["matched_blocks"]) for r in explain_prompt(fleet.state, ids, **kw)}


def test_explainer_reasons(fleet):
    got = reasons(fleet, [1, 2, 3, 4])
    assert got == {"a": ("full_match", 2), "b": ("divergent", 1), "c": ("lora", 0)}
    b = explain_prompt(fleet.state, [1, 2, 3, 4])[1]
    assert (
        b["detail"]["position"] == 3 and b["detail"]["prompt_token"] == 4 and b["detail"]["cached_token"] == 9
    )
    assert reasons(fleet, [1, 2, 3, 4, 5])["a"] == ("block_floor", 2)
    assert reasons(fleet, [1, 2], lora="sql")["c"] == ("full_match", 1)
    # differs at its block's first token
    assert reasons(fleet, [1, 2, 7, 7])["a"] == ("divergent", 1)
    assert reasons(fleet, [1, 2, 3, 9, 5, 5])["b"] == ("cache_end", 2)
    fleet.remove("a", ["02"])
    a = explain_prompt(fleet.state, [1, 2, 3, 4])[0]
    assert a["reason"] == "removed" and a["detail"]["t"] == fleet.seq - 1
    assert reasons(fleet, [1, 2, 3, 9])["a"] == ("elsewhere", 1)


def test_explainer_salt_extra_keys_group_and_empty():
    f = Fleet()
    for w in ("s", "v", "h", "e"):
        f.worker(w)
    f.store("s", ["01"], [1, 2], salt="tenant-a")
    f.store("v", ["02"], [1, 2], extra_keys=[["tenant-b"]])
    f.store("h", ["03"], [1, 2], group=1)
    got = reasons(f, [1, 2])
    # vLLM's salt rides in the first block's extra keys: named as the salt it is
    assert got == {"s": ("salt", 0), "v": ("salt", 0), "h": ("full_match", 1), "e": ("empty", 0)}
    assert reasons(f, [1, 2], salt="tenant-a")["s"] == ("full_match", 1)
    assert reasons(f, [1, 2], salt="tenant-b")["v"] == ("full_match", 1)
    assert reasons(f, [1, 2], group=0)["h"] == ("group", 0)


def test_explainer_skips_blocks_of_another_size():
    """A worker whose block size changed: its old blocks cannot match, and explaining does not fail on them."""
    f = Fleet()
    f.worker("a")
    f.store("a", ["01"], [1, 2, 3], size=3)
    # block size now 2
    f.store("a", ["02"], [5, 6], size=2)
    (got,) = explain_prompt(f.state, [1, 2, 3, 4])
    # no block of its size starts like the prompt: nothing starts it (not "divergent at position 0")
    assert (got["reason"], got["matched_blocks"]) == ("cache_end", 0)
    assert "no cached block starts the prompt" in got["message"]
    (got,) = explain_prompt(f.state, [5, 7, 3, 4])
    assert (got["reason"], got["detail"]["position"], got["detail"]["cached_token"]) == ("divergent", 1, 6)


def test_parse_query():
    assert parse_query("1 2 3") == ([1, 2, 3], {})
    assert parse_query("salt=x group=1 | ids: 4,5") == ([4, 5], {"salt": "x", "group": 1})
    with pytest.raises(QueryError, match="--tokenizer"):
        parse_query("hello world")
    with pytest.raises(QueryError, match="options before"):
        parse_query("color=red | 1 2")

    class Tok:
        def encode(self, text, add_special_tokens=False):
            return [len(w) for w in text.split()]

    assert parse_query("lora=x | hi there", Tok()) == ([2, 5], {"lora": "x"})


# --- live == replay: the structs attach folds, and the dicts its trace holds, give the same state -------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from engine.trace.attach_structs import KvBlockRemoved, KvBlockStored  # noqa: E402
from kvtui.state.fleet_view import fleet_view  # noqa: E402

HASHES = [1, 2, 3, 4, 5, (1 << 64) - 1, (1 << 63) + 7]


@st.composite
def block_events(draw):
    events = [
        {
            "seq": 0,
            "t": 0.0,
            "type": "attach_worker",
            "worker": w,
            "source": f"tcp://h:{w}",
            "name": w,
            "rank": 0,
        }
        for w in ("a", "b")
    ]
    t = 0.0
    for _ in range(draw(st.integers(1, 40))):
        # a message's events share t; seconds roll over
        t += draw(st.sampled_from([0.0, 0.3, 1.2]))
        worker, group = draw(st.sampled_from(["a", "b", "c"])), draw(st.sampled_from([0, 0, 1]))
        medium = draw(st.sampled_from(["GPU", "GPU", "CPU", "cpu", None]))
        # vLLM's secondary offloading tier
        owner = draw(st.sampled_from([None, None, "kvcr"]))
        kind = draw(st.sampled_from(["stored", "stored", "removed", "cleared"]))
        hashes = draw(st.lists(st.sampled_from(HASHES), min_size=1, max_size=3, unique=True))
        if kind == "stored":
            parent = draw(st.sampled_from([None, *HASHES]))
            tokens = [h % 7 for h in hashes for _ in range(2)]
            texts = draw(st.sampled_from([None, [chr(97 + x) for x in tokens]]))
            if medium == "CPU" and draw(st.booleans()):
                # an offloading tier's store without token ids (vLLM's placeholder)
                parent, tokens, texts = None, [], None
            extra = draw(st.sampled_from([None, [["sql", [1, 2]]] * len(hashes)]))
            events.append(
                KvBlockStored(
                    hashes,
                    parent,
                    tokens,
                    2,
                    None,
                    medium,
                    draw(st.sampled_from([None, "sql"])),
                    draw(st.sampled_from([None, "tenant"])),
                    extra,
                    group,
                    texts=texts,
                    ownership=owner,
                    t=t,
                    worker=worker,
                )
            )
        elif kind == "removed":
            events.append(KvBlockRemoved(hashes, medium, group, ownership=owner, t=t, worker=worker))
        else:
            events.append({"seq": 0, "t": t, "type": "kv_all_cleared", "worker": worker, "cause": "cleared"})
    for seq, e in enumerate(events):
        if isinstance(e, dict):
            e["seq"] = seq
        else:
            e.seq = seq
    return events


def _state(s: FleetState):
    return (
        {
            k: (n.parent, n.token_ids, n.lora, n.salt, n.extra, n.texts, n.holders, n.removed, n.copies, n.t)
            for k, n in s.nodes.items()
        },
        s.children,
        list(s.orphans),
        list(s.gone),
        s.held_nodes,
        s.index,
        s.t,
        {
            w: (
                x.held,
                x.held_by_group,
                x.resident,
                x.lower,
                x.stored,
                x.removed,
                x.cleared,
                x.copies,
                x.buckets,
            )
            for w, x in s.workers.items()
        },
    )


@settings(max_examples=300, deadline=None)
@given(block_events(), st.integers(1, 7))
def test_folding_structs_in_runs_equals_folding_their_trace_dicts_one_by_one(events, run):
    live, replayed = FleetState({}), FleetState({})
    # as the -o file holds them
    written = [e if isinstance(e, dict) else e.as_dict() for e in events]
    for i in range(0, len(events), run):
        live.apply_all(events[i : i + run])
    for e in written:
        replayed.apply(e)
    assert _state(live) == _state(replayed)
    assert fleet_view(live, tree=True) == fleet_view(replayed, tree=True)
    # each worker's counts per tier are the nodes that name it on that tier
    for name, worker in live.workers.items():
        tiers = {tier: 0 for tier in worker.held_tiers()}
        for node in live.nodes.values():
            for tier in node.holders.get(name, ()):
                tiers[tier] += 1
        assert worker.held_tiers() == tiers
        assert worker.held == sum(name in n.holders for n in live.nodes.values())
