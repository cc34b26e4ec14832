"""A CJK character or an emoji split over several tokens: each token carries its bytes (\\xe6\\x97), not U+FFFD,
and the views join them back into the character where they show text."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.engine import Engine, EngineConfig, SamplingParams
from engine.models.text import TokenText
from kvtui.state import CacheState
from kvtui.widgets.base import View
from kvtui.widgets.block_table import BlockTableView
from kvtui.widgets.radix_tree import RadixTreeView
from kvtui.widgets.token_strip import TokenStrip
from tests.helpers.tiny_models import tiny_model

pytestmark = pytest.mark.smollm2
TEXT = "日本語の本 🙂"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from engine.models.packaged import prepared_dir

    return AutoTokenizer.from_pretrained(prepared_dir("smollm2"))


def test_a_token_that_is_part_of_a_character_carries_its_bytes(tokenizer):
    ids = tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    text = TokenText(tokenizer, SimpleNamespace(config=SimpleNamespace(vocab_size=len(tokenizer))))
    texts = [text.token_text(i) for i in ids]
    # no U+FFFD: each partial token says which bytes it holds
    assert texts[:4] == ["\\xe6\\x97", "\\xa5", "本", "\\xe8"] and "\ufffd" not in "".join(texts)
    assert texts[-1] == " 🙂"


def test_the_views_show_the_bytes_and_join_them(tokenizer):
    engine = Engine.from_model(
        tiny_model("llama-gqa", vocab_size=len(tokenizer)),
        tokenizer=tokenizer,
        config=EngineConfig(device="cpu", block_size=4, num_blocks=32),
    )
    events: list[dict] = []
    engine.trace.listeners.append(events.append)
    rid = engine.submit(TEXT, SamplingParams(max_tokens=2))
    while engine.has_unfinished():
        engine.step()
    state = CacheState(engine.trace.header)
    state.apply_all(events)
    strip = TokenStrip(View(state, rid))
    strip.cursor = 1
    assert "\\xe6\\x97\\xa5本" in strip.render_row(3, 120).text
    assert "bytes of '日'" in strip.render_row(1, 120).text
    # a block's text (under the kept rows' label): its characters, and the bytes of one its boundary splits
    # (語 = e8 aa 9e over 2 blocks)
    assert "日本\\xe8 " in BlockTableView(View(state, rid)).render_row(3, 120).text
    # a tree node of both blocks: the characters
    assert "日本語の本" in RadixTreeView(View(state, rid)).render_line(1).text
