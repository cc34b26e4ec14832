"""kvtui's binary block trace (block_trace.py, block_stream.py), the streamed Mooncake-shaped generator
(synth_stream.py), `kvtui whatif --sample` and the progress bar of a long pass."""

from __future__ import annotations

import json

from click.testing import CliRunner

from kvtui.cli import main
from kvtui.whatif import onepass
from kvtui.whatif.block_trace import BlockTraceWriter, convert, iter_chunks, load_blocks
from kvtui.whatif.loaders import detect_format, load
from kvtui.whatif.stream import FileProgress, one_pass_file
from kvtui.whatif.synth import MooncakeLikeConfig, mooncake_like, write_jsonl
from kvtui.whatif.synth import main as synth_main
from kvtui.whatif.synth_stream import write_stream


def jsonl(tmp_path, requests=300, seed=3):
    records = mooncake_like(seed, MooncakeLikeConfig(requests=requests, duration_ms=600_000))
    return write_jsonl(records, tmp_path / "m.jsonl")


def test_a_converted_trace_reads_back_as_the_same_requests(tmp_path):
    source = jsonl(tmp_path)
    requests, ids, problems = convert(source, tmp_path / "m.kvblk", "mooncake", 512)
    assert detect_format(tmp_path / "m.kvblk") == "blocks" and not problems
    a, b = load(source), load_blocks(tmp_path / "m.kvblk")
    assert requests == a.num_requests and ids == sum(len(r.hash_ids) for r in a.requests)
    assert [(r.arrival, r.input_length, r.output_length, r.hash_ids) for r in a.requests] == [
        (r.arrival, r.input_length, r.output_length, r.hash_ids) for r in b.requests
    ]


def test_a_block_trace_streams_into_the_curve_of_its_jsonl(tmp_path):
    source = jsonl(tmp_path, requests=400)
    convert(source, tmp_path / "m.kvblk", "mooncake", 512)
    for block_size in (512, 128, 1024):
        _, from_json = one_pass_file(source, [block_size], 512)
        summary, from_blocks = one_pass_file(tmp_path / "m.kvblk", [block_size], 512, fmt="blocks")
        assert summary.num_requests == 400
        assert from_blocks[block_size].curve() == from_json[block_size].curve(), block_size
    # and a slice of its requests, as --requests A:B takes it
    _, part = one_pass_file(tmp_path / "m.kvblk", [512], 512, start=50, stop=250, fmt="blocks")
    assert part[512].curve() == onepass.lru_curve_of(load(source).slice(50, 250), 512)


def test_a_chunk_cut_short_is_left_out_and_named(tmp_path):
    path = tmp_path / "cut.kvblk"
    with BlockTraceWriter(path, 16) as writer:
        writer.add(0.0, 20, 1, [1, 2])
        writer.flush()
        writer.add(5.0, 16, 1, [1])
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    problems: list[str] = []
    chunks = list(iter_chunks(path, problems))
    assert len(chunks) == 1 and chunks[0].hashes.tolist() == [1, 2]
    assert problems == ["chunk 2: cut short at the end of the file; left out"]


def test_synth_streams_the_references_it_says(tmp_path):
    requests, ids, _ = write_stream(str(tmp_path / "s.kvblk"), 20_000, seed=1, fmt="blocks")
    chunks = list(iter_chunks(tmp_path / "s.kvblk"))
    assert sum(len(c.counts) for c in chunks) == requests
    assert sum(len(c.hashes) for c in chunks) == ids and 20_000 <= ids < 20_000 + 300
    # the JSONL form is the same workload
    write_stream(str(tmp_path / "s.jsonl"), 20_000, seed=1, fmt="jsonl")
    lines = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [r["hash_ids"] for r in lines] == [r.hash_ids for r in load_blocks(tmp_path / "s.kvblk").requests]
    # Mooncake-like reuse: shared heads and later turns hit an infinite cache
    curve = onepass.lru_curve_of(load(tmp_path / "s.jsonl"), 512)
    assert 0.2 < curve.hit_rate(curve.distinct_blocks) < 0.9


def test_synth_main_prints_what_it_wrote(tmp_path, capsys):
    synth_main([str(tmp_path / "x.kvblk"), "--references", "5000", "--seed", "2"])
    out = capsys.readouterr().out
    requests = sum(len(c.counts) for c in iter_chunks(tmp_path / "x.kvblk"))
    assert f"{requests:,} requests" in out and "(blocks)" in out


def test_whatif_samples_a_block_trace(tmp_path):
    source = jsonl(tmp_path, requests=500)
    convert(source, tmp_path / "m.kvblk", "mooncake", 512)
    args = [str(tmp_path / "m.kvblk"), "--method", "one-pass", "--capacity", "100k,1M", "--json", "-q"]
    exact = json.loads(CliRunner().invoke(main, ["whatif", *args]).output)
    result = CliRunner().invoke(main, ["whatif", *args, "--sample", "0.5"])
    assert result.exit_code == 0, result.output
    sampled = json.loads(result.output)
    assert any(note.startswith("sampled: SHARDS over 50%") for note in sampled["notes"])
    for a, b in zip(exact["points"], sampled["points"]):
        # at 50% every block referenced twice is kept whole: the hits are exact, and so is their error
        assert b["token_hit_rate_error"] < 0.01 and abs(a["token_hit_rate"] - b["token_hit_rate"]) < 0.01
    assert sampled["optimal"] == []


def test_sample_is_refused_outside_the_one_pass(tmp_path):
    source = jsonl(tmp_path, requests=20)
    result = CliRunner().invoke(main, ["whatif", str(source), "--sample", "0.1"])
    assert (
        result.exit_code == 2
        and "--sample samples the one-pass curve: give --method one-pass" in result.output
    )
    result = CliRunner().invoke(main, ["whatif", str(source), "--method", "one-pass", "--sample", "1.5"])
    assert result.exit_code == 2


def test_the_progress_bar_gives_references_a_second_and_memory():
    progress = FileProgress("one-pass", 1000)
    progress.references = 2_000_000
    line = progress.line(100, 500, progress.started + 1.0)
    assert "[##########..........] 50%" in line and "2,000,000 block references" in line
    assert "2.00M/s" in line and "GiB" in line


def test_the_converter_command_checks_its_input(tmp_path, capsys):
    from kvtui.whatif.block_trace import main as convert_main

    source = jsonl(tmp_path, requests=30)
    assert convert_main([str(source), str(tmp_path / "c.kvblk")]) == 0
    assert "30 requests" in capsys.readouterr().out and detect_format(tmp_path / "c.kvblk") == "blocks"
    (tmp_path / "bad.jsonl").write_text('{"prompt_token_ids": [1]}\n')
    assert convert_main([str(tmp_path / "bad.jsonl"), str(tmp_path / "d.kvblk")]) == 2
    assert "not a Mooncake or Qwen-Bailian record" in capsys.readouterr().err
