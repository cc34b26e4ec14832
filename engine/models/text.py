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
            return list(self.tokenizer(prompt)["input_ids"])
        items = list(prompt)
        if items and all(isinstance(m, dict) for m in items):
            self._need_tokenizer("chat messages")
            if not getattr(self.tokenizer, "chat_template", None):
                raise ValueError(
                    "this model has no chat template (a base model such as Gemma 3 270M): send plain "
                    "text, not chat messages"
                )
            text = self.tokenizer.apply_chat_template(items, tokenize=False, add_generation_prompt=True)
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
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
            self._cache[token_id] = text
        return text

    def detokenize(self, token_ids: list[int]) -> str:
        if self.tokenizer is None:
            return "".join(self.token_text(t) for t in token_ids)
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def _need_tokenizer(self, what: str) -> None:
        if self.tokenizer is None:
            raise ValueError(f"{what} needs a tokenizer; this engine has none, so pass token ids")


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
