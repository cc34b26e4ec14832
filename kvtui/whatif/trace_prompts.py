"""The prompt each prefix lookup of a recorded trace matched: a request's arrival prompt, then after each edit
the edited sequence, rebuilt from the events (`request_arrived`, `token_emitted`, `edit`) by the engine's own
edit rule (engine/core/edits.py). The miss ledger classifies every lookup's prompt with it."""

from __future__ import annotations

from engine.core.edits import EditError, apply_edit


class TracePrompts:
    """Each request's tokens as the trace has them so far: prompt + generated."""

    def __init__(self) -> None:
        # request id -> (tokens, prompt length)
        self._seqs: dict[str, tuple[list[int], int]] = {}
        self.salts: dict[str, object] = {}

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._seqs

    def on_event(self, event: dict) -> None:
        kind = event["type"]
        if kind == "request_arrived":
            prompt = list(event["prompt_token_ids"])
            self._seqs[event["request_id"]] = (prompt, len(prompt))
            self.salts[event["request_id"]] = event.get("cache_salt")
        elif kind == "token_emitted" and event["request_id"] in self._seqs:
            tokens, _ = self._seqs[event["request_id"]]
            position = event["position"]
            # a token at a position already held replaces it and what followed (a rerun after an edit)
            if 0 <= position <= len(tokens):
                del tokens[position:]
                tokens.append(event["token_id"])
        elif kind == "edit" and event["request_id"] in self._seqs:
            self._edit(event)

    def _edit(self, event: dict) -> None:
        rid = event["request_id"]
        tokens, prompt_len = self._seqs[rid]
        kind, deleted = event["kind"], event["num_deleted"]
        new = deleted if kind == "delete" else list(event["token_ids"])
        try:
            edited = apply_edit(
                tokens[:prompt_len],
                tokens[prompt_len:],
                event["position"],
                new,
                kind,
                deleted if kind == "replace" else None,
            )
        # an edit the sequence rebuilt so far cannot take: the lookup's own length still counts
        except EditError:
            return
        self._seqs[rid] = (list(edited.tokens), len(edited.prompt))

    def lookup_tokens(self, request_id: str, prompt_tokens: int) -> list[int]:
        """The `prompt_tokens` tokens a lookup matched; positions the events do not give are -1 (they never
        match a cached block, so they count as never seen)."""
        tokens, _ = self._seqs[request_id]
        return tokens[:prompt_tokens] + [-1] * (prompt_tokens - len(tokens))
