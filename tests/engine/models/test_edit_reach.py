"""Causal vs bidirectional on real models (engine/models/edit_reach.py, `kvtui compare-edit`): edit token m; in the causal
decoder positions < m stay bit-identical in every layer, in the BERT encoder every position changes."""

import pytest
from click.testing import CliRunner

from engine.models.edit_reach import EditReachError, aligned_position, format_reach, load_encoder, measure

TEXT = "The cat sat on the mat because it was warm."


@pytest.fixture(scope="module")
def encoder():
    return load_encoder()


@pytest.fixture(scope="module")
def causal():
    from engine.models.loading import load_model

    return load_model("smollm2", device="cpu")


def test_encoder_loads_offline_from_safetensors(encoder):
    model, tokenizer, name = encoder
    assert type(model).__name__ == "BertModel" and name == "all-MiniLM-L6-v2"
    assert tokenizer(TEXT)["input_ids"][0] == tokenizer.cls_token_id


def test_encoder_edit_changes_every_position_in_every_layer(encoder):
    reach = measure(*encoder[:2], TEXT, 5, "dog", encoder[2], "bidirectional")
    assert reach.old_token == "the" and reach.new_token == "dog"
    assert not any(reach.identical)
    assert all(value > 1e-3 for value in reach.per_position)
    # the embeddings: only m itself
    assert reach.changed_positions(0) == [5]
    # from the first attention layer: all of them
    for layer in range(1, reach.per_layer.shape[0]):
        assert reach.changed_positions(layer) == list(range(len(reach.tokens)))
    assert "nothing before m survives" in format_reach(reach)


@pytest.mark.smollm2
def test_causal_edit_keeps_positions_before_m_bit_identical(causal):
    from engine.models.loading import stock_attention

    model, tokenizer, name = causal
    m = 4
    with stock_attention(model):
        reach = measure(model, tokenizer, TEXT, m, " dog", name, "causal")
    # bit-identical, every layer
    assert reach.identical[:m] == [True] * m
    assert reach.per_position[:m] == [0.0] * m
    assert not any(reach.identical[m:]) and all(value > 0 for value in reach.per_position[m:])
    for layer in range(1, reach.per_layer.shape[0]):
        assert reach.changed_positions(layer) == list(range(m, len(reach.tokens)))
    assert "4 of 4" in format_reach(reach) and "the cache keeps [0, m)" in format_reach(reach)


@pytest.mark.smollm2
def test_positions_align_on_the_same_word_and_errors_are_plain(causal, encoder):
    _, causal_tokenizer, _ = causal
    encoder_tokenizer = encoder[1]
    # ' the' -> 'the' after [CLS]
    assert aligned_position(causal_tokenizer, encoder_tokenizer, TEXT, 4) == 5
    with pytest.raises(EditReachError, match="outside"):
        aligned_position(causal_tokenizer, encoder_tokenizer, TEXT, 99)
    with pytest.raises(EditReachError, match="already the token"):
        measure(*encoder[:2], TEXT, 5, "the", "enc", "bidirectional")


@pytest.mark.smollm2
def test_compare_edit_command(causal):
    from kvtui.cli import main

    result = CliRunner().invoke(main, ["compare-edit", TEXT, "--position", "4", "--token", " dog"])
    assert result.exit_code == 0, result.output
    causal_part, encoder_part = result.output.split("all-MiniLM-L6-v2 (bidirectional)")
    # four rows, and the summary line
    assert causal_part.count("bit-identical") == 4 + 1
    assert "0 of 5" in encoder_part and "bit-identical" not in encoder_part.split("positions before m")[0]
    bad = CliRunner().invoke(main, ["compare-edit", TEXT, "--position", "40"])
    assert bad.exit_code != 0 and "outside" in bad.output and "Traceback" not in bad.output
