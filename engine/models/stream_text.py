"""Streaming text that never breaks a character: tokens arrive one at a time, text leaves in whole characters.

A byte-level BPE (SmolLM2, GPT-2, Llama 3) splits an emoji or a CJK character over several tokens, each holding
a few of its UTF-8 bytes; decoding one token alone gives U+FFFD. So the text of the tokens seen so far is decoded
over a short window of recent tokens (for tokenizers whose text depends on the neighbours, e.g. SentencePiece's
leading spaces) and a delta ending in U+FFFD is held back until the character completes (vLLM does the same).
"""

from __future__ import annotations

REPLACEMENT = "\ufffd"


class StreamDecoder:
    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip = skip_special_tokens
        self.ids: list[int] = []
        # decoding starts here (a little context before the unread tokens)
        self.prefix_offset = 0
        # tokens before this one have been printed
        self.read_offset = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip)

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes (possibly '' while a character is still partial)."""
        self.ids.append(token_id)
        printed = self._decode(self.ids[self.prefix_offset : self.read_offset])
        text = self._decode(self.ids[self.prefix_offset :])
        if text.endswith(REPLACEMENT) or len(text) <= len(printed):
            # an unfinished character (or a token with no text of its own yet)
            return ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return text[len(printed) :]

    def flush(self) -> str:
        """At the end: whatever is held back (an invalid byte sequence prints as U+FFFD, as decode would)."""
        printed = self._decode(self.ids[self.prefix_offset : self.read_offset])
        text = self._decode(self.ids[self.prefix_offset :])
        self.prefix_offset = self.read_offset = len(self.ids)
        return text[len(printed) :]
