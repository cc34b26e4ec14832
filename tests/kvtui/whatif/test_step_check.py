"""The step check against vLLM's published state: a divergence planted in a real log's events (a block vLLM
kept, a run of blocks it never stored) is found at its step, with the blocks and requests it concerns."""

from __future__ import annotations

import json
import shutil

from click.testing import CliRunner

from kvtui.cli import main
from kvtui.whatif.step_check import check_lines

LOG = "fixtures/attach/vllm_0.32_proxy_waves.jsonl"
EVENTS = "fixtures/attach/vllm_0.32_proxy_waves.events.jsonl"


def planted(tmp_path, change) -> dict:
    """The fixture with its events changed by `change(batches in step order)`, replayed."""
    batches = [json.loads(line) for line in open(EVENTS)]
    batches.sort(key=lambda b: (b["ts"], b["seq"]))
    change(batches)
    shutil.copy(LOG, tmp_path / "requests.jsonl")
    (tmp_path / "requests.events.jsonl").write_text("".join(json.dumps(b) + "\n" for b in batches))
    result = CliRunner().invoke(main, ["whatif", str(tmp_path / "requests.jsonl"), "--json", "-q"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["fidelity"]["step_check"]


def test_the_unchanged_fixture_has_no_divergence(tmp_path):
    assert planted(tmp_path, lambda batches: None)["first"] is None


def test_a_block_vllm_kept_is_the_first_divergence(tmp_path):
    """Step 17 is the log's first eviction (vLLM preempted proxy-8 and took its block 16 back; steps 0-7 are
    the attacher's replay of the server's last steps before the log): without its BlockRemoved, vLLM keeps a
    block the twin evicted."""

    def keep(batches):
        assert len(batches[17]["removed"]) == 1 and not batches[17]["stored"]
        batches[17]["removed"] = []

    check = planted(tmp_path, keep)
    first = check["first"]
    assert first["step"] == 17
    assert first["only_server"] == [{"block": 16, "requests": ["proxy-8"]}]
    assert first["only_twin"] == []
    assert check["divergent_steps"] >= 1


def test_a_block_vllm_never_stored_is_the_twins_only(tmp_path):
    """Step 11 stored one block, proxy-3's 17th, which its 23rd output token filled: left out, the twin holds a
    block vLLM never published."""

    def drop(batches):
        assert [len(s["hashes"]) for s in batches[11]["stored"]] == [1] and not batches[11]["removed"]
        batches[11]["stored"] = []

    first = planted(tmp_path, drop)["first"]
    assert first["step"] == 11
    assert first["only_server"] == []
    assert first["only_twin"] == [{"block": 16, "requests": ["proxy-3"]}]


def test_the_text_names_the_step_blocks_and_requests():
    check = {
        "steps": 9,
        "divergent_steps": 2,
        "first": {
            "step": 4,
            "t": 1.5,
            "only_server": [{"block": 3, "requests": ["proxy-2", "proxy-5"]}],
            "only_twin": [{"block": 0, "requests": ["proxy-7"]}, {"more": 3}],
            "admitted": ["proxy-7"],
        },
    }
    text = "\n".join(check_lines(check))
    assert "9 server steps, the twin's cached blocks equal vLLM's after 7; first divergence at step 4" in text
    assert "held by vLLM, not the twin: block 3 of proxy-2, proxy-5" in text
    assert "held by the twin only: block 0 of proxy-7; 3 more" in text
    assert "admitted in that step: proxy-7" in text
