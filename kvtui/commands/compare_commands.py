"""`kvtui compare-edit`: edit one token and see which hidden states change, causal decoder vs encoder."""

from __future__ import annotations

import click


@click.command("compare-edit")
@click.argument("text")
@click.option(
    "--position",
    "-p",
    type=click.IntRange(min=0),
    default=None,
    help="m: the token to replace, counted in the causal model's tokens of TEXT [default: the middle].",
)
@click.option(
    "--token",
    "-t",
    "replacement",
    default=" dog",
    show_default=True,
    help="The replacement text (its first token in each model's vocabulary).",
)
@click.option(
    "--model",
    "-m",
    default="smollm2",
    show_default=True,
    help="The causal model: 'smollm2', 'gemma3', a local directory, a .gguf file or a hub id.",
)
@click.option("--width", type=click.IntRange(min=1), default=32, show_default=True, help="Width of the bars.")
def compare_edit(text, position, replacement, model, width):
    """Replace token m of TEXT; per position, how much each model's hidden states changed.

    \b
    Two real models read TEXT twice, before and after the edit, with no cache:
      a causal decoder (SmolLM2 by default): position j reads only tokens <= j, so
        positions < m are bit-identical in every layer: a KV cache keeps [0, m);
      a bidirectional encoder (all-MiniLM-L6-v2, BERT): every position reads every
        other, so every position changes: its whole cache would be recomputed.
    Each row: max |diff| over every layer's hidden state at that position, a bar
    scaled to the model's largest change, and whether it stayed bit-identical.
    The encoder edits the token over the same character (tokenizers differ).
    Example: kvtui compare-edit "The cat sat on the mat because it was warm." -p 4 -t " dog"
    """
    from engine.models.edit_reach import EditReachError, aligned_position, format_reach, load_encoder, measure
    from engine.models.loading import ModelLoadError, load_model, stock_attention

    try:
        causal, causal_tokenizer, causal_name = load_model(model, device="cpu")
        if position is None:
            position = len(causal_tokenizer(text)["input_ids"]) // 2
        with stock_attention(causal):
            reach = measure(causal, causal_tokenizer, text, position, replacement, causal_name, "causal")
        encoder, encoder_tokenizer, encoder_name = load_encoder()
        at = aligned_position(causal_tokenizer, encoder_tokenizer, text, position)
        encoded = measure(
            encoder,
            encoder_tokenizer,
            text,
            at,
            replacement.strip() or replacement,
            encoder_name,
            "bidirectional",
        )
    except (EditReachError, ModelLoadError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(format_reach(reach, width))
    click.echo()
    click.echo(format_reach(encoded, width))


COMMANDS = [compare_edit]
