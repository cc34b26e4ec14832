"""A real run: SmolLM2 recorded concurrent8 with --publish while `kvtui attach -o` listened on loopback
(fixtures/attach/). The attach trace replays to the engine's own prefix tree, and explains its prompts."""

from __future__ import annotations

from pathlib import Path

from kvtui.app.loader import load_trace
from kvtui.state import replay
from kvtui.state.fleet import replay_fleet
from kvtui.state.fleet_explain import explain_prompt
from kvtui.state.fleet_stats import workers_summary

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "attach"


def _engine_paths(state) -> set[tuple]:
    out = set()

    def walk(node_id, prefix):
        for child_id in state.nodes[node_id].children:
            child = state.nodes[child_id]
            bs = len(child.token_ids) // max(1, len(child.blocks))
            tokens = list(prefix)
            for i in range(len(child.blocks)):
                tokens += child.token_ids[i * bs : (i + 1) * bs]
                out.add(tuple(tokens))
            walk(child_id, tokens)

    walk(0, [])
    return out


def _fleet_paths(fleet) -> set[tuple]:
    out = set()
    for node in fleet.nodes.values():
        if node.holders:
            tokens, cur = [], node
            while cur is not None:
                tokens[:0] = cur.token_ids
                cur = fleet.nodes.get((cur.group, cur.parent)) if cur.parent else None
            out.add(tuple(tokens))
    return out


def test_the_attach_recording_holds_the_engines_tree():
    engine = load_trace(str(FIXTURES / "concurrent8_smollm2_engine.jsonl"))
    attach = load_trace(str(FIXTURES / "concurrent8_smollm2.jsonl"))
    assert engine.error is None and attach.error is None
    state = replay(engine.header, engine.events)
    fleet = replay_fleet(attach.header, attach.events)
    assert _fleet_paths(fleet) == _engine_paths(state) and len(_fleet_paths(fleet)) == 16
    (worker,) = workers_summary(fleet)
    assert worker["resident_blocks"] == 16 and worker["gaps"] == worker["malformed"] == 0
    # every prompt of the run: its cached blocks on the attached worker are what the engine's tree holds
    for rid, request in state.requests.items():
        prompt = list(request.token_ids[: request.prompt_len])
        (result,) = explain_prompt(fleet, prompt)
        assert result["matched_blocks"] == len(state.cached_path(prompt)), (rid, result["message"])
