"""Streamed text never breaks a character (engine/models/stream_text.py, `kvtui generate`): SmolLM2's byte-level BPE
splits an emoji or a CJK character over several tokens, and each of them alone decodes to U+FFFD."""

import json

import pytest
from click.testing import CliRunner

from engine.models.stream_text import REPLACEMENT, StreamDecoder

pytestmark = pytest.mark.smollm2

TEXT = "猫が好き 🐱 and naïve café: 你好，世界！🎉"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from engine.models.packaged import prepared_dir

    return AutoTokenizer.from_pretrained(prepared_dir("smollm2"))


def test_token_by_token_text_is_whole_characters_and_adds_up(tokenizer):
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    # the hazard is real: tokens split characters
    assert any(REPLACEMENT in tokenizer.decode([i]) for i in ids)
    decoder = StreamDecoder(tokenizer)
    pieces = [decoder.push(i) for i in ids] + [decoder.flush()]
    assert "".join(pieces) == TEXT
    assert not any(REPLACEMENT in piece for piece in pieces)
    # some tokens held their bytes back until the character was complete
    assert "" in pieces


def test_special_tokens_are_skipped_and_an_unfinished_character_flushes_as_decode_does(tokenizer):
    ids = tokenizer("Hi 🐱", add_special_tokens=False)["input_ids"]
    decoder = StreamDecoder(tokenizer)
    out = "".join(decoder.push(i) for i in [tokenizer.eos_token_id] + ids[:-1])
    # the space travels with the emoji's first bytes: held back with them
    assert out == "Hi"
    rest = decoder.flush()
    # cut off: U+FFFD, as decode
    assert rest == tokenizer.decode(ids[:-1])[len("Hi") :] and REPLACEMENT in rest


def test_generate_streams_whole_emoji(tmp_path, tokenizer):
    from kvtui.cli import main

    trace = tmp_path / "t.jsonl"
    result = CliRunner().invoke(
        main,
        [
            "generate",
            "--raw",
            "🐱🐱🐱🐱🐱🐱🐱🐱",
            "--max-tokens",
            "6",
            "--device",
            "cpu",
            "--trace",
            str(trace),
        ],
    )
    assert result.exit_code == 0, result.output
    emitted = [json.loads(line) for line in trace.read_text().splitlines()[1:]]
    ids = [e["token_id"] for e in emitted if e["type"] == "token_emitted"]
    assert any(REPLACEMENT in tokenizer.decode([i]) for i in ids)
    streamed = result.stdout.split("\n-- ")[0].rstrip("\n")
    assert streamed == tokenizer.decode(ids, skip_special_tokens=True)
    assert REPLACEMENT not in streamed and "🐱" in streamed
