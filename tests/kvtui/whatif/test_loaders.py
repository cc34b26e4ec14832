"""Reading workloads: Mooncake lines (bad ones named, good ones kept), token ids that never collide, format
detection, the proxy log."""

import json

from kvtui.whatif.loaders import detect_format, load
from kvtui.whatif.requests import hash_id_tokens


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_mooncake_bad_lines_are_named_and_good_lines_kept(tmp_path):
    path = write_lines(
        tmp_path / "m.jsonl",
        [
            json.dumps({"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [0, 1]}),
            "{not json",
            json.dumps({"timestamp": 5, "input_length": 1000, "output_length": 10}),
            json.dumps({"timestamp": 9, "input_length": 5000, "output_length": 3, "hash_ids": [0, 1]}),
            json.dumps({"timestamp": 7, "input_length": 600, "output_length": 2, "hash_ids": [0, 2]}),
        ],
    )
    workload = load(path)
    assert workload.format == "mooncake"
    assert [r.num_prompt_tokens for r in workload.requests] == [1000, 600]
    assert [p.split(":")[0] for p in workload.problems] == ["line 2", "line 3", "line 4"]
    assert "missing hash_ids" in workload.problems[1]
    assert "does not fit 2 hash ids" in workload.problems[2]
    # arrivals in seconds from the first
    assert [r.arrival for r in workload.requests] == [0.0, 0.007]


def test_hash_ids_become_runs_of_their_own_tokens():
    a = hash_id_tokens([0, 1], 1000, 512)
    b = hash_id_tokens([0, 2], 600, 512)
    assert len(a) == 1000 and len(b) == 600
    # the shared id gives the same tokens; distinct ids share no token at all; the last id is partial
    assert a[:512] == b[:512]
    assert not set(a[512:]) & set(b[512:])
    assert len(set(a)) == 1000


def test_formats_are_detected_from_the_content(tmp_path):
    assert detect_format("fixtures/traces/chat.jsonl") == "trace"
    assert detect_format("fixtures/workloads/chat.json") == "workload"
    proxy = write_lines(
        tmp_path / "p.jsonl",
        [
            json.dumps({"arrival": 3.0, "prompt_token_ids": [1, 2, 3], "output_token_ids": [4]}),
            json.dumps({"arrival": 1.0, "prompt_token_ids": [1, 2], "output_length": 5, "cache_salt": "t1"}),
            json.dumps({"arrival": 2.0, "prompt_token_ids": []}),
        ],
    )
    assert detect_format(proxy) == "proxy-log"
    workload = load(proxy)
    assert [r.arrival for r in workload.requests] == [0.0, 2.0]
    assert workload.requests[0].cache_salt == "t1" and workload.requests[0].num_output_tokens == 5
    assert workload.problems[0].startswith("line 3:")


def test_a_text_workload_without_a_tokenizer_says_what_to_do():
    import pytest

    from kvtui.whatif.loaders import WorkloadFormatError

    with pytest.raises(WorkloadFormatError, match="--tokenizer"):
        load("fixtures/workloads/chat.json")


def test_a_trace_replays_its_recorded_prompts_and_outputs():
    workload = load("fixtures/traces/shared_system_8users.jsonl")
    assert workload.format == "trace" and len(workload.requests) == 8
    assert all(r.output_token_ids for r in workload.requests)
