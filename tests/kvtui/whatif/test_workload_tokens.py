"""`kvtui whatif WORKLOAD.json --tokenizer NAME` tokenizes a workload exactly as `kvtui record` did: every
prompt (text, or chat messages through the chat template) gives the recorded trace's prompt token ids, for
every workload in fixtures/workloads/ that has a recorded trace in fixtures/traces/."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvtui.cli import main
from kvtui.whatif.loaders import WorkloadFormatError, load, load_tokenizer

ROOT = Path(__file__).resolve().parents[3]
WORKLOADS = sorted((ROOT / "fixtures" / "workloads").glob("*.json"))
RECORDED = [w for w in WORKLOADS if (ROOT / "fixtures" / "traces" / f"{w.stem}.jsonl").exists()]
# the model named in a recorded trace's header -> what --tokenizer takes
TOKENIZERS = {"SmolLM2-135M-Instruct": "smollm2", "gemma-3-270m": "gemma3"}


def _header(workload: Path) -> dict:
    with open(ROOT / "fixtures" / "traces" / f"{workload.stem}.jsonl", encoding="utf-8") as f:
        return json.loads(f.readline())


def _marks(workload: Path):
    name = TOKENIZERS[_header(workload)["model"]["name"]]
    return [getattr(pytest.mark, name)]


# a tokenizer loads in a few seconds: once per module
tokenizer = functools.cache(load_tokenizer)


def _recorded_prompts(workload: Path) -> dict[str, list[int]]:
    prompts = {}
    for line in (ROOT / "fixtures" / "traces" / f"{workload.stem}.jsonl").read_text().splitlines()[1:]:
        event = json.loads(line)
        if event["type"] == "request_arrived" and not event.get("parent_id"):
            prompts[event["request_id"]] = event["prompt_token_ids"]
    return prompts


@pytest.mark.parametrize("workload", [pytest.param(w, marks=_marks(w), id=w.stem) for w in RECORDED])
def test_whatif_reads_a_workload_with_the_recorded_traces_prompt_tokens(workload, monkeypatch):
    name = TOKENIZERS[_header(workload)["model"]["name"]]
    loaded_tokenizer = tokenizer(name)
    monkeypatch.setattr("kvtui.whatif.loaders.load_tokenizer", lambda spec: loaded_tokenizer)
    loaded = load(workload, "workload", tokenizer=name)
    recorded = _recorded_prompts(workload)
    assert recorded
    assert {r.request_id: r.prompt_token_ids() for r in loaded.requests} == recorded


def test_tokenizer_takes_a_model_name_and_the_hit_rate_is_the_recorded_runs():
    """chat_template_jitter: 103 prompt tokens and the recorded 26.2%, where `role: content` lines gave 87 and
    29.9%."""
    path = ROOT / "fixtures" / "workloads" / "chat_template_jitter.json"
    args = ["whatif", str(path), "--tokenizer", "smollm2", "--method", "simulated", "--json", "-q"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    trace = ROOT / "fixtures" / "traces" / "chat_template_jitter.jsonl"
    recorded = json.loads(
        CliRunner().invoke(main, ["whatif", str(trace), "--method", "simulated", "--json", "-q"]).stdout
    )
    assert (
        report["prompt_tokens"]
        == recorded["prompt_tokens"]
        == sum(map(len, _recorded_prompts(path).values()))
    )
    assert report["points"][0]["token_hit_rate"] == recorded["points"][0]["token_hit_rate"]


@pytest.mark.gemma3
def test_chat_messages_and_a_tokenizer_without_a_chat_template_is_one_line(monkeypatch):
    """Gemma 3 270M is a base model: chat messages are refused, as `kvtui record` refuses them."""
    monkeypatch.setattr("kvtui.whatif.loaders.load_tokenizer", lambda spec: tokenizer("gemma3"))
    with pytest.raises(WorkloadFormatError, match="--tokenizer gemma3: this model has no chat template"):
        load(ROOT / "fixtures" / "workloads" / "chat.json", "workload", tokenizer="gemma3")
