"""Between text and token ids: prompts (text, chat messages or ids) to ids, ids to the text the trace carries.

Every event that names tokens carries their text too, so a replay needs no tokenizer; `token_text` caches the
decoded text of each id because the engine asks for it on every emitted token and every tree insert.
"""

from __future__ import annotations

from collections.abc import Sequence

Prompt = str | Sequence[int] | Sequence[dict]


class TokenText:
    def __init__(self, tokenizer, model):
        self.tokenizer = tokenizer
        self.vocab_size = model.config.vocab_size
        self.eos_ids = _eos_ids(getattr(model, "generation_config", None), tokenizer)
        self._cache: dict[int, str] = {}

    def encode(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            self._need_tokenizer("a text prompt")
            return prompt_ids(self.tokenizer, prompt)
        items = list(prompt)
        if items and all(isinstance(m, dict) for m in items):
            self._need_tokenizer("chat messages")
            return prompt_ids(self.tokenizer, items)
        if all(isinstance(t, int) and not isinstance(t, bool) for t in items):
            bad = [t for t in items if not 0 <= t < self.vocab_size]
            if bad:
                raise ValueError(f"token ids out of range for a vocabulary of {self.vocab_size}: {bad[:5]}")
            return items
        raise TypeError(
            "a prompt is text, a list of token ids, or a list of chat messages ({'role', 'content'})"
        )

    def edit_tokens(self, tokens: str | Sequence[int]) -> list[int]:
        """The tokens an edit types: text is tokenized without special tokens (it lands mid-sequence)."""
        if isinstance(tokens, str):
            self._need_tokenizer("text in an edit")
            tokens = self.tokenizer(tokens, add_special_tokens=False)["input_ids"]
        return self.encode(list(tokens)) if tokens else []

    def token_text(self, token_id: int) -> str:
        text = self._cache.get(token_id)
        if text is None:
            text = self.tokenizer.decode([token_id]) if self.tokenizer is not None else f"<{token_id}>"
            if "\ufffd" in text:
                # part of a character (a CJK character or an emoji over several tokens): its bytes, as \xe6\x97,
                # which a viewer can join with its neighbours' (U+FFFD would say nothing)
                raw = token_bytes(self.tokenizer, token_id)
                text = raw.decode("utf-8", errors="backslashreplace") if raw is not None else text
            self._cache[token_id] = text
        return text

    def detokenize(self, token_ids: list[int]) -> str:
        if self.tokenizer is None:
            return "".join(self.token_text(t) for t in token_ids)
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def _need_tokenizer(self, what: str) -> None:
        if self.tokenizer is None:
            raise ValueError(f"{what} needs a tokenizer; this engine has none, so pass token ids")


def prompt_ids(tokenizer, prompt: str | Sequence[dict]) -> list[int]:
    """The token ids of a text prompt, or of chat messages rendered through the tokenizer's chat template with
    the assistant's turn opened: what the engine runs (`kvtui record`) and what `kvtui whatif` reads a workload
    with. ValueError when chat messages meet a tokenizer without a chat template."""
    if isinstance(prompt, str):
        return list(tokenizer(prompt)["input_ids"])
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "this model has no chat template (a base model such as Gemma 3 270M): send plain "
            "text, not chat messages"
        )
    text = tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _eos_ids(generation_config, tokenizer) -> set[int]:
    ids: set[int] = set()
    for source in (
        getattr(generation_config, "eos_token_id", None),
        getattr(tokenizer, "eos_token_id", None),
    ):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(source)
    return ids


def token_bytes(tokenizer, token_id: int) -> bytes | None:
    """The raw bytes of a byte-level BPE token (GPT-2's alphabet: SmolLM2, Llama 3) or of a byte-fallback piece
    (`<0xE6>`: SentencePiece); None for any other tokenizer."""
    piece = tokenizer.convert_ids_to_tokens(token_id)
    if not isinstance(piece, str):
        return None
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            return bytes([int(piece[3:5], 16)])
        except ValueError:
            return None
    decoder = _byte_decoder()
    if piece and all(c in decoder for c in piece):
        return bytes(decoder[c] for c in piece)
    return None


_BYTE_DECODER: dict[str, int] = {}


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte: printable bytes stand for themselves, the others are
    shifted to 256 and up."""
    if not _BYTE_DECODER:
        printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
        shifted = 0
        for b in range(256):
            if b in printable:
                _BYTE_DECODER[chr(b)] = b
            else:
                _BYTE_DECODER[chr(256 + shifted)] = b
                shifted += 1
    return _BYTE_DECODER
